"""Makes the tiny .npy/.npz files the data-reader tests read. Deterministic; run from anywhere:
    python3 test/data/files/make_files.py
Needs only numpy. The tests assert the values written here (arange-based, no randomness)."""
import os
import numpy as np
from numpy.lib import format as npf

here = os.path.dirname(os.path.abspath(__file__))
def path(name): return os.path.join(here, name)

np.save(path('f32_2x3.npy'), np.arange(6, dtype=np.float32).reshape(2, 3) * 0.5)
np.save(path('f64_scalar.npy'), np.array(3.25, dtype=np.float64))
np.save(path('f16.npy'), np.array([0.0, 1.0, -2.5, 65504.0, np.inf, 6e-8], dtype=np.float16))
np.save(path('bool.npy'), np.array([[True, False], [False, True]]))
np.save(path('i64.npy'), np.array([-3, 0, 2**40, -(2**62)], dtype=np.int64))
np.save(path('u8.npy'), np.arange(250, 256, dtype=np.uint8))
np.save(path('i8.npy'), np.array([-128, -1, 0, 127], dtype=np.int8))
np.save(path('i16.npy'), np.array([-32768, 7, 32767], dtype=np.int16))
np.save(path('i32.npy'), np.array([[-(2**31), 1], [2, 2**31 - 1]], dtype=np.int32))
np.save(path('u16.npy'), np.array([0, 65535], dtype=np.uint16))
np.save(path('u32.npy'), np.array([0, 2**32 - 1], dtype=np.uint32))
np.save(path('u64.npy'), np.array([0, 2**64 - 1], dtype=np.uint64))
np.save(path('empty.npy'), np.zeros((0, 3), dtype=np.float32))
np.save(path('str.npy'), np.array(['cat', 'dög', ''], dtype='<U3'))
np.save(path('f32_be.npy'), np.array([1.5, -2.0, 3.0], dtype='>f4'))
with open(path('v2.npy'), 'wb') as f:
    npf.write_array(f, np.arange(4, dtype=np.int32), version=(2, 0))
with open(path('v3.npy'), 'wb') as f:
    npf.write_array(f, np.arange(4, dtype=np.float64), version=(3, 0))
np.save(path('fortran.npy'), np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3)))
np.save(path('object.npy'), np.array([1, 'a', None], dtype=object), allow_pickle=True)
np.save(path('structured.npy'), np.zeros(2, dtype=[('a', '<f4'), ('b', '<i4')]))
with open(path('f32_2x3.npy'), 'rb') as f:
    whole = f.read()
with open(path('truncated.npy'), 'wb') as f:
    f.write(whole[:-5])

x = (np.arange(4 * 1 * 2 * 2, dtype=np.float32).reshape(4, 1, 2, 2) - 8) / 4
labels = np.array([3, 1, 4, 1], dtype=np.int64)
np.savez(path('xy.npz'), x=x, labels=labels)
np.savez_compressed(path('xy_compressed.npz'), x=x, labels=labels)
np.savez(path('single.npz'), x.astype(np.float64))  # one unnamed array: key arr_0, float64 data

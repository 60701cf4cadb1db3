/**
 * Data sets: readers/writers for .npy, .npz, JSONL and model-zoo test sets, plus loading a data set
 * for a model, taking, batching and seeded random inputs. Re-exports only.
 */
export { decodeNpy, encodeNpy, readNpy, writeNpy } from './npy.js';
export { decodeNpz, encodeNpz, readNpz, writeNpz, type NpzWriteOptions } from './npz.js';
export { readJsonl, type JsonlData, type ReadJsonlOptions } from './jsonl.js';
export { readTensorFile, readTestDataSet, readTestDataSets, testSetFeeds, type NamedTensorData, type TestDataSet } from './test-data-set.js';
export { loadDataset, type Dataset, type LoadDatasetOptions } from './dataset.js';
export { batchEnd, batches, feedsOf, fixedBatchSize, take, type Batch } from './batching.js';
export { randomDataset, withRandomInputsHint, type RandomDatasetOptions } from './random.js';
export { type InputValues } from './constants.js';
export { convertFloat, isConvertibleFloat } from './dtype-convert.js';
export { concatSamples, sliceSamples } from '../ir/samples.js';

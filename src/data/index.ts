/**
 * Data sets: readers/writers for .npy, .npz, JSONL and model-zoo test sets, plus loading a data set
 * for a model, taking, batching and seeded random inputs. Re-exports only.
 */
export { decodeNpy, encodeNpy, readNpy, writeNpy } from './npy.js';
export { decodeNpz, encodeNpz, readNpz, writeNpz, type NpzWriteOptions } from './npz.js';
export { readJsonl, type JsonlData } from './jsonl.js';
export { readTensorFile, readTestDataSet, readTestDataSets, testSetFeeds, type NamedTensorData, type TestDataSet } from './test-data-set.js';
export {
  batches,
  fixedBatchSize,
  loadDataset,
  randomDataset,
  take,
  type Batch,
  type Dataset,
  type LoadDatasetOptions,
  type RandomDatasetOptions,
} from './dataset.js';
export { concatSamples, sliceSamples } from '../ir/samples.js';

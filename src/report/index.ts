/**
 * Reporters over a benchmark result: human table, JSON document, Markdown. Re-exports only.
 */
export { labelRangeWarnings, renderTable, type TableOptions } from './table.js';
export { renderJson, benchmarkDocument, BENCHMARK_SCHEMA_VERSION, type BenchmarkDocument } from './json.js';
export { renderMarkdown } from './markdown.js';

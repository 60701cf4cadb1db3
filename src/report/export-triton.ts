/**
 * Reporters over a Triton export (app/export-triton): the lines for the terminal (the files
 * written, relative to the working folder, then the config.pbtxt) and the JSON document
 * (schema/export-triton.schema.json). Pure.
 * May import: app result types, node:path.
 */
import path from 'node:path';
import type { ExportTritonResult } from '../app/export-triton.js';

/** Bump on any change that breaks a reader. */
export const EXPORT_TRITON_SCHEMA_VERSION = 1;

/** The `--json` document: the paths written, the setting, the config text and the search when there was one. */
export function exportTritonDocument(result: ExportTritonResult): object {
  return {
    schemaVersion: EXPORT_TRITON_SCHEMA_VERSION,
    kind: 'export-triton',
    command: 'export-triton',
    modelDir: result.modelDir,
    configPath: result.configPath,
    modelPath: result.modelPath,
    setting: result.setting,
    config: result.config,
    ...(result.search ? { search: result.search } : {}),
  };
}

/** 'wrote <config> and <model>', paths relative to `cwd`, a blank line, then the config.pbtxt. */
export function renderExportTritonSummary(result: ExportTritonResult, options: { cwd: string }): string {
  return `wrote ${path.relative(options.cwd, result.configPath)} and ${path.relative(options.cwd, result.modelPath)}\n\n${result.config}`;
}

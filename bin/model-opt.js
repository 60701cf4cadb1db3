#!/usr/bin/env node
import { main } from '../dist/cli/index.js';

// A reader that stops early (`model-opt quantize --help | head`) closes the pipe: that is not an
// error of ours, so end quietly instead of printing an EPIPE stack trace.
for (const stream of [process.stdout, process.stderr]) {
  stream.on('error', (error) => {
    if (error.code === 'EPIPE') process.exit(process.exitCode ?? 0);
    throw error;
  });
}

process.exitCode = await main(process.argv);

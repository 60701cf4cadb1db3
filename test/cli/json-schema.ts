/** The small JSON Schema validator now lives in src/util/json-schema.ts (optimize --recipe uses it); re-exported for the schema tests. */
export { validate } from '../../src/util/json-schema.js';

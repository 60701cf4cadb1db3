/**
 * A small JSON Schema validator for the subset schema/*.schema.json use (draft 2020-12 keywords:
 * type, const, enum, properties, required, items, additionalProperties, minimum, $ref to
 * #/$defs/...). A keyword outside the subset throws, so a schema cannot quietly use one
 * this does not check. Returns the errors as 'path: message' lines (empty when valid).
 * Used by optimize --recipe (app/optimize-recipe.ts) and the schema tests (test/cli/json-documents.test.ts).
 * Imports nothing.
 */
type Schema = Record<string, unknown>;

const ANNOTATIONS = new Set(['$schema', '$id', 'title', 'description', '$defs']);
const KEYWORDS = new Set(['type', 'const', 'enum', 'properties', 'required', 'items', 'additionalProperties', 'minimum', '$ref']);

function typeOf(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'array';
  return typeof value;
}

function hasType(value: unknown, type: string): boolean {
  if (type === 'integer') return typeof value === 'number' && Number.isInteger(value);
  if (type === 'number') return typeof value === 'number';
  return typeOf(value) === type;
}

export function validate(root: Schema, value: unknown): string[] {
  const errors: string[] = [];
  const check = (schema: Schema, v: unknown, at: string): void => {
    for (const key of Object.keys(schema)) {
      if (!ANNOTATIONS.has(key) && !KEYWORDS.has(key)) throw new Error(`${at}: schema keyword '${key}' is outside the subset this validator checks`);
    }
    if (typeof schema['$ref'] === 'string') {
      const match = /^#\/\$defs\/([\w-]+)$/.exec(schema['$ref']);
      const target = match ? (root['$defs'] as Record<string, Schema> | undefined)?.[match[1]!] : undefined;
      if (!target) throw new Error(`${at}: cannot resolve $ref ${schema['$ref']}`);
      check(target, v, at);
    }
    if (schema['type'] !== undefined) {
      const types = ([] as string[]).concat(schema['type'] as string | string[]);
      if (!types.some((t) => hasType(v, t))) {
        errors.push(`${at}: expected ${types.join(' or ')}, got ${typeOf(v)}`);
        return;
      }
    }
    if ('const' in schema && JSON.stringify(schema['const']) !== JSON.stringify(v))
      errors.push(`${at}: expected ${JSON.stringify(schema['const'])}, got ${JSON.stringify(v)}`);
    if (Array.isArray(schema['enum']) && !schema['enum'].some((e) => JSON.stringify(e) === JSON.stringify(v))) {
      errors.push(`${at}: ${JSON.stringify(v)} is not one of ${JSON.stringify(schema['enum'])}`);
    }
    if (typeof schema['minimum'] === 'number' && typeof v === 'number' && v < schema['minimum'])
      errors.push(`${at}: ${v} is below the minimum ${schema['minimum']}`);
    if (typeOf(v) === 'object') {
      const o = v as Record<string, unknown>;
      for (const name of (schema['required'] as string[] | undefined) ?? []) if (!(name in o)) errors.push(`${at}: missing required '${name}'`);
      const props = (schema['properties'] as Record<string, Schema> | undefined) ?? {};
      for (const [name, item] of Object.entries(o)) {
        // Own properties only: a name from the document may be 'constructor' or '__proto__'.
        if (Object.hasOwn(props, name)) check(props[name]!, item, `${at}.${name}`);
        else if (schema['additionalProperties'] === false) errors.push(`${at}: unexpected property '${name}'`);
        else if (typeof schema['additionalProperties'] === 'object') check(schema['additionalProperties'] as Schema, item, `${at}.${name}`);
      }
    }
    if (Array.isArray(v) && schema['items']) v.forEach((item, i) => check(schema['items'] as Schema, item, `${at}[${i}]`));
  };
  check(root, value, '$');
  return errors;
}

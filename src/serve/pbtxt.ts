/**
 * The protobuf text format (what Triton's config.pbtxt is written in), schema-free: a parser to a
 * tree of named fields and a writer back, in Triton's house style. The typed model-config layer
 * (triton-config.ts) sits on top; fields it does not know stay in the tree and are written back.
 * Supported: `#` comments; `name: value`, `name { ... }`, `name: { ... }`, `name < ... >`, lists
 * `name: [ 1, 2 ]` and `name [ { ... }, { ... } ]`; strings in '' or "" with C escapes (adjacent
 * strings join); numbers (decimal, hex, float, inf, nan); identifiers (enums, true/false);
 * optional `,` or `;` between fields; `[extension.names]` as field names.
 * Imports: ../errors.js.
 */
import { InputError } from '../errors.js';

export type PbScalar = { kind: 'string'; value: string } | { kind: 'number'; text: string } | { kind: 'ident'; text: string };
export type PbValue = PbScalar | PbMessage;
export interface PbMessage {
  kind: 'message';
  fields: PbField[];
}
export interface PbField {
  name: string;
  values: PbValue[];
  /** Written as a list (`name: [ ... ]`) even with one element. */
  list: boolean;
}

/** Where each parsed field was written (fields built in code have none). */
const locations = new WeakMap<PbField, { line: number; col: number }>();

/** The line and column a parsed field's name was written at, if it came from text. */
export function pbLocation(field: PbField): { line: number; col: number } | undefined {
  return locations.get(field);
}

export const pb = {
  str: (value: string): PbScalar => ({ kind: 'string', value }),
  num: (n: number | bigint): PbScalar => ({ kind: 'number', text: String(n) }),
  ident: (text: string): PbScalar => ({ kind: 'ident', text }),
  bool: (b: boolean): PbScalar => ({ kind: 'ident', text: b ? 'true' : 'false' }),
  msg: (fields: PbField[]): PbMessage => ({ kind: 'message', fields }),
  field: (name: string, value: PbValue | PbValue[], list = Array.isArray(value)): PbField => ({
    name,
    values: Array.isArray(value) ? value : [value],
    list,
  }),
};

interface Token {
  type: 'ident' | 'string' | 'number' | 'punct';
  text: string;
  /** Decoded value for strings. */
  value?: string;
  line: number;
  col: number;
}

const PUNCT = new Set(['{', '}', '<', '>', '[', ']', ':', ',', ';']);

function tokenize(text: string, source: string): Token[] {
  const tokens: Token[] = [];
  let i = 0;
  let line = 1;
  let lineStart = 0;
  const fail = (msg: string): never => {
    throw new InputError(`${source}:${line}:${i - lineStart + 1}: ${msg}`);
  };
  while (i < text.length) {
    const c = text[i]!;
    if (c === '\n') {
      i++;
      line++;
      lineStart = i;
      continue;
    }
    if (c === ' ' || c === '\t' || c === '\r' || c === '\f' || c === '\v') {
      i++;
      continue;
    }
    if (c === '#') {
      while (i < text.length && text[i] !== '\n') i++;
      continue;
    }
    const col = i - lineStart + 1;
    if (PUNCT.has(c)) {
      tokens.push({ type: 'punct', text: c, line, col });
      i++;
      continue;
    }
    if (c === '"' || c === "'") {
      let out = '';
      i++;
      for (;;) {
        if (i >= text.length || text[i] === '\n') fail('unterminated string');
        const ch = text[i]!;
        if (ch === c) {
          i++;
          break;
        }
        if (ch === '\\') {
          const e = text[i + 1] ?? '';
          i += 2;
          const simple: Record<string, string> = { n: '\n', t: '\t', r: '\r', a: '\x07', b: '\b', f: '\f', v: '\v', '\\': '\\', "'": "'", '"': '"', '?': '?' };
          if (e in simple) out += simple[e];
          else if (e === 'x' || e === 'X') {
            const m = /^[0-9a-fA-F]{1,2}/.exec(text.slice(i));
            if (!m) fail('bad \\x escape');
            out += String.fromCharCode(parseInt(m![0], 16));
            i += m![0].length;
          } else if (/[0-7]/.test(e)) {
            const m = /^[0-7]{0,2}/.exec(text.slice(i))!;
            out += String.fromCharCode(parseInt(e + m[0], 8));
            i += m[0].length;
          } else if (e === 'u' || e === 'U') {
            const n = e === 'u' ? 4 : 8;
            const hex = text.slice(i, i + n);
            if (!new RegExp(`^[0-9a-fA-F]{${n}}$`).test(hex)) fail(`bad \\${e} escape`);
            const code = parseInt(hex, 16);
            if (code > 0x10ffff) fail(`\\${e}${hex} is beyond Unicode (at most \\U0010FFFF)`);
            out += String.fromCodePoint(code);
            i += n;
          } else fail(`unknown escape \\${e}`);
          continue;
        }
        out += ch;
        i++;
      }
      const prev = tokens[tokens.length - 1];
      // Adjacent string literals concatenate, as in C.
      if (prev && prev.type === 'string') prev.value += out;
      else tokens.push({ type: 'string', text: '', value: out, line, col });
      continue;
    }
    const m = /^(-\s*)?(0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?[fF]?|[A-Za-z_][A-Za-z0-9_.]*)/.exec(text.slice(i));
    if (!m) fail(`unexpected character '${c}'`);
    const word = m![0].replace(/\s+/g, '');
    const body = m![2]!;
    const isNumber = /^[0-9.]/.test(body) || (m![1] !== undefined && /^(inf|infinity|nan)$/i.test(body));
    tokens.push({ type: isNumber ? 'number' : m![1] !== undefined ? 'number' : 'ident', text: word, line, col });
    i += m![0].length;
  }
  return tokens;
}

/** Parse text-format protobuf into a field tree. InputError naming `source`, line and column. */
export function parsePbtxt(text: string, source = 'config.pbtxt'): PbMessage {
  const tokens = tokenize(text, source);
  let pos = 0;
  const peek = (): Token | undefined => tokens[pos];
  const fail = (msg: string, t: Token | undefined = peek()): never => {
    throw new InputError(t ? `${source}:${t.line}:${t.col}: ${msg}` : `${source}: ${msg} at end of file`);
  };
  const isPunct = (t: Token | undefined, p: string): boolean => t !== undefined && t.type === 'punct' && t.text === p;
  const expect = (p: string): void => {
    if (!isPunct(peek(), p)) fail(`expected '${p}'${peek() ? `, found '${peek()!.type === 'string' ? '"' + peek()!.value + '"' : peek()!.text}'` : ''}`);
    pos++;
  };

  const scalar = (): PbScalar => {
    const t = peek();
    if (!t) return fail('expected a value');
    pos++;
    if (t.type === 'string') return { kind: 'string', value: t.value! };
    if (t.type === 'number') return { kind: 'number', text: t.text };
    if (t.type === 'ident') return { kind: 'ident', text: t.text };
    return fail(`expected a value, found '${t.text}'`, t);
  };

  // Nesting deeper than any real config is refused before it can exhaust the stack.
  const MAX_DEPTH = 100;
  let depth = 0;
  const message = (close: string | undefined): PbMessage => {
    if (++depth > MAX_DEPTH) fail(`blocks nested more than ${MAX_DEPTH} deep`);
    const fields: PbField[] = [];
    for (;;) {
      const t = peek();
      if (!t) {
        if (close) fail(`expected '${close}'`);
        break;
      }
      if (close && isPunct(t, close)) {
        pos++;
        break;
      }
      fields.push(field());
      if (isPunct(peek(), ',') || isPunct(peek(), ';')) pos++;
    }
    depth--;
    return { kind: 'message', fields };
  };

  const openMessage = (): PbMessage => {
    const t = peek()!;
    pos++;
    return message(t.text === '{' ? '}' : '>');
  };

  const field = (): PbField => {
    const t = peek()!;
    const f = fieldAt(t);
    locations.set(f, { line: t.line, col: t.col });
    return f;
  };

  const fieldAt = (t: Token): PbField => {
    let name: string;
    if (isPunct(t, '[')) {
      pos++;
      const parts: string[] = [];
      while (peek() && !isPunct(peek(), ']')) parts.push(scalar().kind === 'ident' ? tokens[pos - 1]!.text : fail('bad extension name'));
      expect(']');
      name = `[${parts.join('')}]`;
    } else if (t.type === 'ident') {
      name = t.text;
      pos++;
    } else return fail(`expected a field name, found '${t.type === 'string' ? '"' + t.value + '"' : t.text}'`, t);
    const colon = isPunct(peek(), ':');
    if (colon) pos++;
    const next = peek();
    if (isPunct(next, '{') || isPunct(next, '<')) return { name, values: [openMessage()], list: false };
    if (isPunct(next, '[')) {
      pos++;
      const values: PbValue[] = [];
      while (!isPunct(peek(), ']')) {
        if (!peek()) fail(`expected ']'`);
        values.push(isPunct(peek(), '{') || isPunct(peek(), '<') ? openMessage() : scalar());
        if (isPunct(peek(), ',')) pos++;
        else if (!isPunct(peek(), ']')) fail(`expected ',' or ']'`);
      }
      pos++;
      return { name, values, list: true };
    }
    if (!colon) fail(`expected ':' or '{' after '${name}'`);
    return { name, values: [scalar()], list: false };
  };

  return message(undefined);
}

function quote(s: string): string {
  let out = '"';
  for (const ch of s) {
    const code = ch.codePointAt(0)!;
    if (ch === '"') out += '\\"';
    else if (ch === '\\') out += '\\\\';
    else if (ch === '\n') out += '\\n';
    else if (ch === '\t') out += '\\t';
    else if (ch === '\r') out += '\\r';
    else if (code < 0x20 || code === 0x7f) out += `\\${code.toString(8).padStart(3, '0')}`;
    else out += ch;
  }
  return out + '"';
}

function formatScalar(v: PbScalar): string {
  return v.kind === 'string' ? quote(v.value) : v.text;
}

/** Write a field tree as text format, Triton style (2-space indent, lists in brackets). */
export function formatPbtxt(msg: PbMessage, indent = ''): string {
  const lines: string[] = [];
  const inner = `${indent}  `;
  for (const f of msg.fields) {
    const allScalars = f.values.every((v) => v.kind !== 'message');
    if (!f.list && f.values.length === 1) {
      const v = f.values[0]!;
      if (v.kind === 'message') {
        lines.push(v.fields.length === 0 ? `${indent}${f.name} { }` : `${indent}${f.name} {\n${formatPbtxt(v, inner)}${indent}}`);
      } else lines.push(`${indent}${f.name}: ${formatScalar(v)}`);
    } else if (allScalars) {
      lines.push(`${indent}${f.name}: [ ${(f.values as PbScalar[]).map(formatScalar).join(', ')} ]`);
    } else {
      const items = f.values.map((v) => (v.kind === 'message' ? `${inner}{\n${formatPbtxt(v, `${inner}  `)}${inner}}` : `${inner}${formatScalar(v)}`));
      lines.push(`${indent}${f.name} [\n${items.join(',\n')}\n${indent}]`);
    }
  }
  return lines.length ? `${lines.join('\n')}\n` : '';
}

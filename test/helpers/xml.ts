/**
 * A small strict XML reader for tests (no XML package is a dependency): elements, attributes,
 * text and the predefined and numeric character references; it throws on what a conforming parser
 * rejects in such documents (a raw '<' or '&' in text or an attribute, an unknown entity, an
 * unquoted or repeated attribute, mismatched or unclosed tags, a forbidden character, two roots).
 */
export interface XmlElement {
  name: string;
  attributes: Record<string, string>;
  children: XmlElement[];
  text: string;
}

const FORBIDDEN = /[\u0000-\u0008\u000B\u000C\u000E-\u001F\uFFFE\uFFFF]/;
const NAME = /^[A-Za-z_:][\w.:-]*/;

function decode(raw: string, where: string): string {
  if (/<|&(?!(?:amp|lt|gt|quot|apos|#\d+|#x[\da-fA-F]+);)/.test(raw)) throw new Error(`raw '<' or '&' in ${where}: ${raw}`);
  return raw.replace(/&(amp|lt|gt|quot|apos|#\d+|#x[\da-fA-F]+);/g, (_, e: string) => {
    if (e.startsWith('#x')) return String.fromCodePoint(parseInt(e.slice(2), 16));
    if (e.startsWith('#')) return String.fromCodePoint(Number(e.slice(1)));
    return { amp: '&', lt: '<', gt: '>', quot: '"', apos: "'" }[e]!;
  });
}

export function parseXml(xml: string): XmlElement {
  if (FORBIDDEN.test(xml)) throw new Error('a character XML 1.0 forbids');
  let i = 0;
  const rest = (): string => xml.slice(i);
  const skipSpace = (): void => {
    while (i < xml.length && /\s/.test(xml[i]!)) i++;
  };
  if (rest().startsWith('<?xml')) i = xml.indexOf('?>') + 2;
  const element = (): XmlElement => {
    if (xml[i] !== '<') throw new Error(`expected '<' at ${i}`);
    i++;
    const name = NAME.exec(rest())?.[0];
    if (!name) throw new Error(`bad tag name at ${i}`);
    i += name.length;
    const node: XmlElement = { name, attributes: {}, children: [], text: '' };
    for (;;) {
      skipSpace();
      if (rest().startsWith('/>')) {
        i += 2;
        return node;
      }
      if (xml[i] === '>') {
        i++;
        break;
      }
      const attr = /^([A-Za-z_:][\w.:-]*)\s*=\s*"([^"]*)"/.exec(rest());
      if (!attr) throw new Error(`bad attribute in <${name}> at ${i}: ${rest().slice(0, 40)}`);
      if (attr[1]! in node.attributes) throw new Error(`attribute ${attr[1]} twice in <${name}>`);
      // Attribute-value normalization: a literal line break or tab reads as a space.
      node.attributes[attr[1]!] = decode(attr[2]!.replace(/[\t\n\r]/g, ' '), `attribute ${attr[1]}`);
      i += attr[0].length;
    }
    for (;;) {
      const next = xml.indexOf('<', i);
      if (next < 0) throw new Error(`<${name}> is not closed`);
      node.text += decode(xml.slice(i, next), `<${name}>`);
      i = next;
      if (rest().startsWith(`</`)) {
        const close = /^<\/([^\s>]+)\s*>/.exec(rest());
        if (close?.[1] !== name) throw new Error(`</${close?.[1]}> closes <${name}>`);
        i += close[0].length;
        return node;
      }
      node.children.push(element());
    }
  };
  skipSpace();
  const root = element();
  skipSpace();
  if (i !== xml.length) throw new Error(`content after the root element: ${rest().slice(0, 40)}`);
  return root;
}

/** Every element named `name` below `node`, depth first. */
export function findAll(node: XmlElement, name: string): XmlElement[] {
  return node.children.flatMap((c) => [...(c.name === name ? [c] : []), ...findAll(c, name)]);
}

// Just enough XML for Pacemaker's --output-as=xml answers (crm_mon, crm_attribute,
// attrd_updater): the attributes of every start tag with a given name. Those
// documents are machine-written, attribute values are always double-quoted, and
// we never need text content, so a tag scanner is all it takes.

const entities: Record<string, string> = { amp: '&', lt: '<', gt: '>', quot: '"', apos: "'" };

function decode(value: string): string {
  return value.replace(/&(#x[0-9a-fA-F]+|#\d+|\w+);/g, (whole, e: string) => {
    if (e[0] === '#') return String.fromCodePoint(e[1] === 'x' ? parseInt(e.slice(2), 16) : parseInt(e.slice(1), 10));
    return entities[e] ?? whole;
  });
}

export type XmlAttributes = Record<string, string>;

/** The attributes of every `<tag ...>` or `<tag .../>` in document order. */
export function elements(xml: string, tag: string): XmlAttributes[] {
  const out: XmlAttributes[] = [];
  const start = new RegExp(`<${tag}(?=[\\s/>])((?:[^>"]|"[^"]*")*)>`, 'g');
  for (const m of xml.matchAll(start)) {
    const attrs: XmlAttributes = {};
    for (const a of m[1].matchAll(/([\w:.-]+)\s*=\s*"([^"]*)"/g)) attrs[a[1]] = decode(a[2]);
    out.push(attrs);
  }
  return out;
}

/** The text between `<tag ...>` and `</tag>` of each element (no nesting of the same tag). */
export function sections(xml: string, tag: string): string[] {
  const re = new RegExp(`<${tag}(?=[\\s/>])(?:[^>"]|"[^"]*")*?(?:/>|>([\\s\\S]*?)</${tag}>)`, 'g');
  return [...xml.matchAll(re)].map((m) => m[1] ?? '');
}

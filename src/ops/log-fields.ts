// Text a peer chose (a container id, a link name, an error description) can be as long
// as a frame, 64 KiB and more: echoed whole, one refused connection wrote a line that
// size, and pino formatted and the disk kept all of it. A log line keeps its start.

/** Characters of a peer's string a log field keeps (a container id is a UUID or a host name). */
export const PEER_TEXT_MAX = 256;

/** The string cut to `max` characters, saying how long it was; anything else as it is. */
export function peerText<T>(value: T, max = PEER_TEXT_MAX): T | string {
  if (typeof value !== 'string' || value.length <= max) return value;
  return `${value.slice(0, max)}... (${value.length} characters)`;
}

/** The fields with each string cut as peerText cuts it (one level: log fields are flat). */
export function peerFields(fields: Record<string, unknown>, max = PEER_TEXT_MAX): Record<string, unknown> {
  let out: Record<string, unknown> | undefined;
  for (const [key, value] of Object.entries(fields)) {
    if (typeof value !== 'string' || value.length <= max) continue;
    out ??= { ...fields };
    out[key] = peerText(value, max);
  }
  return out ?? fields;
}

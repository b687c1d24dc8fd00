// Serial-number arithmetic on 32-bit ids (spec 2.8.9, RFC 1982): transfer-ids,
// delivery-ids and delivery-counts all wrap at 2^32.

export const U32_SPAN = 0x1_0000_0000;

export const serialAdd = (a: number, n: number): number => (a + n) % U32_SPAN;

/** b - a, as a signed distance in (-2^31, 2^31]. */
export function serialDiff(a: number, b: number): number {
  const d = (b - a + U32_SPAN) % U32_SPAN;
  return d > 0x7fffffff ? d - U32_SPAN : d;
}

/** Whether `id` lies in the range first..last (inclusive, wrapping). */
export const inSerialRange = (id: number, first: number, last: number): boolean => (id - first + U32_SPAN) % U32_SPAN <= (last - first + U32_SPAN) % U32_SPAN;

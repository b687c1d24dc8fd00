/** A selector that cannot be taken: what is wrong and, when it is one place, where (0-based). */
export class SelectorError extends Error {
  constructor(
    readonly problem: string,
    readonly position?: number,
  ) {
    super(position === undefined ? problem : `${problem} (at character ${position + 1})`);
    this.name = 'SelectorError';
  }
}

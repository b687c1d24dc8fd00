// How many of something each remote address holds at once (HTTP connections, AMQP
// handshakes), so that one address can be kept to its share of a listener. The map
// holds only addresses that hold something: a spray of addresses that each come and
// go leaves nothing behind.

export class AddressTally {
  private readonly held = new Map<string, number>();

  /** What `key` holds now. */
  count(key: string): number {
    return this.held.get(key) ?? 0;
  }

  /** One more for `key`; the function returned gives it back, once however often it is called. */
  take(key: string): () => void {
    this.held.set(key, this.count(key) + 1);
    let given = false;
    return () => {
      if (given) return;
      given = true;
      const left = this.count(key) - 1;
      if (left > 0) this.held.set(key, left);
      else this.held.delete(key);
    };
  }
}

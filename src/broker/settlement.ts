// When may the broker tell a sender "accepted"? Once every party that must hold
// the change has it: the journal (for durable messages) and, on an HA primary,
// every ready backup. The AMQP edge asks; the store and replication answer.

export interface SettlementGate {
  /**
   * Call back once the changes up to `lsn` are safe: on disk if `durable`, and
   * on every backup that must have them. err = they never will be (disk full,
   * lost primary role); the sender must then be told the message was refused.
   */
  whenSafe(lsn: number, durable: boolean, cb: (err?: Error) => void): void;
  /**
   * Whether whenSafe would answer at once without an error: a caller may then settle
   * without handing over a callback (a non-durable message on a lone broker, per
   * message the only closure its sender made). Absent: never known in advance.
   */
  safeNow?(lsn: number, durable: boolean): boolean;
}

/** Several gates in series: safe when all of them say so. */
export class AllGates implements SettlementGate {
  constructor(private readonly gates: SettlementGate[]) {}

  whenSafe(lsn: number, durable: boolean, cb: (err?: Error) => void): void {
    let pending = this.gates.length;
    let failed = false;
    if (pending === 0) return cb();
    for (const gate of this.gates) {
      gate.whenSafe(lsn, durable, (err) => {
        if (failed) return;
        if (err) {
          failed = true;
          return cb(err);
        }
        if (--pending === 0) cb();
      });
    }
  }

  safeNow(lsn: number, durable: boolean): boolean {
    for (const gate of this.gates) if (!gate.safeNow?.(lsn, durable)) return false;
    return true;
  }
}

/** For a broker with no journal and no backups (tests of the model only). */
export const immediateGate: SettlementGate = { whenSafe: (_lsn, _durable, cb) => cb(), safeNow: () => true };

// Which journal records are still live, and where they are on disk.
//
// It models the synced journal only: the journal applies a record after its
// covering fdatasync, so a record that failed to reach the disk never enters it.
// It answers two questions: what recovery must replay (liveChanges) and which
// segments compaction may copy from or delete (SegmentStats).
//
// Liveness: a declare lives until its delete, a binding until unbind or the
// delete of its queue or exchange, an enqueue until its dequeue or its queue's
// delete, a transaction while any enqueue in it lives, the newest epoch and the
// newest LSN reservation while nothing newer exists. DR (secondary side): a
// dr-transaction lives like a transaction and also while it holds the newest
// source position of one of its queues; the newest dr-queue record per queue lives.
// And the change with the highest LSN lives, whatever it is: it is the journal's
// position, which an HA backup resumes from after a restart.
//
// Tombstones: a dequeue or delete is dead itself, but while a record it killed is
// still on disk it must stay too, or replay would resurrect that record. So each
// segment remembers the segments holding records its tombstones killed
// (`tombTargets`) and may only go once those are gone.

import type { Change } from '../broker/changes.js';
import type { RecordBody } from './record-codec.js';

export interface Location {
  seg: number;
  offset: number;
  /** Frame bytes. */
  size: number;
}

export interface DiskRecord {
  lsn: number;
  kind: RecordBody['kind'];
  /** Where the copy that counts for liveness is (the newest copy, maybe not synced yet). */
  home: Location;
  /** The newest synced copy: where the record may be read back (paged message bodies). */
  at: Location;
  /** Every segment that holds a copy (compaction copies records forward). */
  segs: number[];
  /** Live parts: 1 for a plain live record, the number of live enqueues for a transaction. */
  liveRefs: number;
  /** Kept during recovery only, to return the live changes. */
  body: RecordBody | undefined;
}

export interface SegmentStats {
  id: number;
  /** Synced frame bytes in the segment. */
  bytes: number;
  liveBytes: number;
  live: Set<DiskRecord>;
  tombTargets: Set<number>;
}

interface QueueState {
  declares: DiskRecord[];
  messages: Map<number, DiskRecord>;
}

const bindingKey = (exchange: string, queue: string, key: string): string => `${exchange}\u0000${queue}\u0000${key}`;

export class LiveIndex {
  readonly segments = new Map<number, SegmentStats>();
  private readonly queues = new Map<string, QueueState>();
  private readonly exchanges = new Map<string, DiskRecord[]>();
  private readonly bindings = new Map<string, { exchange: string; queue: string; rec: DiskRecord }>();
  private epochRec: DiskRecord | undefined;
  private reservationRec: DiskRecord | undefined;
  /** The change with the highest LSN: kept on disk so a restart knows how far the log went. */
  private newestRec: DiskRecord | undefined;
  private readonly drPositionRecs = new Map<string, DiskRecord>();
  private readonly drQueueRecs = new Map<string, DiskRecord>();
  epoch = 0;
  reservedUpTo = 0;

  segment(id: number): SegmentStats {
    let s = this.segments.get(id);
    if (!s) {
      s = { id, bytes: 0, liveBytes: 0, live: new Set(), tombTargets: new Set() };
      this.segments.set(id, s);
    }
    return s;
  }

  /** Apply one synced record. `segs` lists every segment holding a copy (recovery may find duplicates). */
  apply(lsn: number, body: RecordBody, home: Location, segs: number[] = [home.seg], keepBody = false): void {
    // One shape for every record (no property added or deleted later): V8 keeps them small.
    const rec: DiskRecord = { lsn, kind: body.kind, home, at: home, segs, liveRefs: 0, body: keepBody ? body : undefined };
    switch (body.kind) {
      case 'queue-declare':
        this.queue(body.name).declares.push(rec);
        this.ref(rec);
        break;
      case 'queue-delete': {
        const q = this.queues.get(body.name);
        if (q) {
          for (const d of q.declares) this.kill(d, rec);
          for (const m of q.messages.values()) this.kill(m, rec);
          this.queues.delete(body.name);
        }
        for (const [k, b] of this.bindings) if (b.queue === body.name) this.unbind(k, rec);
        break;
      }
      case 'exchange-declare': {
        let list = this.exchanges.get(body.name);
        if (!list) this.exchanges.set(body.name, (list = []));
        list.push(rec);
        this.ref(rec);
        break;
      }
      case 'exchange-delete': {
        for (const d of this.exchanges.get(body.name) ?? []) this.kill(d, rec);
        this.exchanges.delete(body.name);
        for (const [k, b] of this.bindings) if (b.exchange === body.name) this.unbind(k, rec);
        break;
      }
      case 'bind': {
        const k = bindingKey(body.exchange, body.queue, body.key);
        // A repeated bind changes nothing: the first one stays the live one.
        if (!this.bindings.has(k)) {
          this.bindings.set(k, { exchange: body.exchange, queue: body.queue, rec });
          this.ref(rec);
        }
        break;
      }
      case 'unbind':
        this.unbind(bindingKey(body.exchange, body.queue, body.key), rec);
        break;
      case 'enqueue':
        this.enqueue(body.queue, body.message.id, rec);
        break;
      case 'dequeue':
        this.dequeue(body.queue, body.id, rec);
        break;
      case 'transaction':
        for (const c of body.changes) {
          if (c.kind === 'enqueue') this.enqueue(c.queue, c.message.id, rec);
          else this.dequeue(c.queue, c.id, rec);
        }
        break;
      case 'dr-transaction':
        for (const c of body.changes) {
          if (c.kind === 'enqueue') this.enqueue(c.queue, c.message.id, rec);
          else this.dequeue(c.queue, c.id, rec);
        }
        // Only the newest position counts (replay is in LSN order), so no tombstone.
        for (const q of body.queues) this.keepNewest(this.drPositionRecs, q, rec);
        break;
      case 'dr-queue':
        this.keepNewest(this.drQueueRecs, body.queue, rec);
        break;
      case 'epoch':
        // Only the highest epoch matters, so an older one needs no tombstone.
        if (body.epoch >= this.epoch) {
          if (this.epochRec) this.unref(this.epochRec);
          this.epoch = body.epoch;
          this.epochRec = rec;
          this.ref(rec);
        }
        break;
      case 'lsn-reservation':
        if (body.upTo >= this.reservedUpTo) {
          if (this.reservationRec) this.unref(this.reservationRec);
          this.reservedUpTo = body.upTo;
          this.reservationRec = rec;
          this.ref(rec);
        }
        break;
    }
    if (body.kind !== 'lsn-reservation' && (!this.newestRec || lsn > this.newestRec.lsn)) {
      // An HA backup resumes from this position after a restart (see journal.ts):
      // compaction must not delete it, even when the change itself is dead (a dequeue).
      if (this.newestRec) this.unref(this.newestRec);
      this.newestRec = rec;
      this.ref(rec);
    }
    const seg = this.segment(home.seg);
    seg.bytes += home.size;
  }

  /** LSN of the newest change on disk (0 if none). */
  get newestLsn(): number {
    return this.newestRec?.lsn ?? 0;
  }

  /** Is this enqueue (queue, id) still live in `rec`? Used to filter transactions. */
  isLiveMessage(queue: string, id: number, rec: DiskRecord): boolean {
    return this.queues.get(queue)?.messages.get(id) === rec;
  }

  /**
   * Compaction wrote a copy of `rec` at `to`: the copy becomes the one that counts.
   * Called when the copy is queued (not synced) so that a kill arriving meanwhile
   * already names the new segment as a tombstone target. Returns an undo.
   */
  relocate(rec: DiskRecord, to: Location): () => void {
    const from = rec.home;
    const wasLive = rec.liveRefs > 0;
    if (wasLive) this.moveLive(rec, from, to);
    rec.home = to;
    rec.segs.push(to.seg);
    return () => {
      if (rec.home !== to) return;
      if (rec.liveRefs > 0) this.moveLive(rec, to, from);
      rec.home = from;
      // The failed copy's segment stays in `segs`: a tombstone waiting on it is merely conservative.
    };
  }

  /** A copy made by relocate() is synced: reads may use it (its old segment may go next). */
  copySynced(rec: DiskRecord, loc: Location): void {
    if (rec.home === loc) rec.at = loc;
  }

  /** Where the synced journal holds the enqueue of message `id` on `queue`, if it does. */
  messageLocation(queue: string, id: number): Location | undefined {
    return this.queues.get(queue)?.messages.get(id)?.at;
  }

  /** Count the bytes of a synced copy written by compaction. */
  addCopyBytes(loc: Location): void {
    this.segment(loc.seg).bytes += loc.size;
  }

  /** May this segment be deleted: nothing live in it, and every record its tombstones killed is gone. */
  isDeletable(id: number): boolean {
    const s = this.segments.get(id);
    if (!s) return true;
    if (s.live.size > 0) return false;
    for (const t of s.tombTargets) if (this.segments.has(t)) return false;
    return true;
  }

  dropSegment(id: number): void {
    this.segments.delete(id);
  }

  /** Live records homed in `id`, in LSN order. */
  liveIn(id: number): DiskRecord[] {
    return [...(this.segments.get(id)?.live ?? [])].sort((a, b) => a.lsn - b.lsn);
  }

  /**
   * The live changes in LSN order (recovery only: needs the bodies). Transactions
   * are cut down to their live enqueues: their dequeues and dead enqueues have
   * nothing left to act on.
   */
  liveChanges(): Array<{ lsn: number; change: Change }> {
    const live: DiskRecord[] = [];
    for (const s of this.segments.values()) for (const r of s.live) live.push(r);
    live.sort((a, b) => a.lsn - b.lsn);
    const out: Array<{ lsn: number; change: Change }> = [];
    for (const r of live) {
      const body = r.body;
      if (!body || body.kind === 'lsn-reservation') continue;
      out.push({ lsn: r.lsn, change: body.kind === 'transaction' || body.kind === 'dr-transaction' ? this.filterTransaction(body, r) : body });
    }
    return out;
  }

  filterTransaction<T extends Extract<Change, { kind: 'transaction' | 'dr-transaction' }>>(body: T, rec: DiskRecord): T {
    return { ...body, changes: body.changes.filter((c) => c.kind === 'enqueue' && this.isLiveMessage(c.queue, c.message.id, rec)) };
  }

  releaseBodies(): void {
    for (const s of this.segments.values()) for (const r of s.live) r.body = undefined;
  }

  // ---- internals ----------------------------------------------------------

  private queue(name: string): QueueState {
    let q = this.queues.get(name);
    if (!q) this.queues.set(name, (q = { declares: [], messages: new Map() }));
    return q;
  }

  private enqueue(queue: string, id: number, rec: DiskRecord): void {
    const q = this.queue(queue);
    const old = q.messages.get(id);
    if (old) this.kill(old, rec);
    q.messages.set(id, rec);
    this.ref(rec);
  }

  private dequeue(queue: string, id: number, killer: DiskRecord): void {
    const q = this.queues.get(queue);
    const m = q?.messages.get(id);
    if (!q || !m) return; // not journaled (non-durable) or already gone
    q.messages.delete(id);
    this.kill(m, killer);
  }

  private keepNewest(map: Map<string, DiskRecord>, key: string, rec: DiskRecord): void {
    const old = map.get(key);
    if (old && old.lsn > rec.lsn) return;
    if (old) this.unref(old);
    map.set(key, rec);
    this.ref(rec);
  }

  private unbind(key: string, killer: DiskRecord): void {
    const b = this.bindings.get(key);
    if (!b) return;
    this.bindings.delete(key);
    this.kill(b.rec, killer);
  }

  private ref(rec: DiskRecord): void {
    if (rec.liveRefs++ === 0) {
      const s = this.segment(rec.home.seg);
      s.live.add(rec);
      s.liveBytes += rec.home.size;
    }
  }

  private unref(rec: DiskRecord): void {
    if (rec.liveRefs <= 0) return;
    if (--rec.liveRefs === 0) {
      const s = this.segments.get(rec.home.seg);
      if (s) {
        s.live.delete(rec);
        s.liveBytes -= rec.home.size;
      }
    }
  }

  private kill(target: DiskRecord, killer: DiskRecord): void {
    this.unref(target);
    for (const ks of killer.segs) {
      const stats = this.segment(ks);
      for (const t of target.segs) if (t !== ks) stats.tombTargets.add(t);
    }
  }

  private moveLive(rec: DiskRecord, from: Location, to: Location): void {
    const a = this.segments.get(from.seg);
    if (a) {
      a.live.delete(rec);
      a.liveBytes -= from.size;
    }
    const b = this.segment(to.seg);
    b.live.add(rec);
    b.liveBytes += to.size;
  }
}

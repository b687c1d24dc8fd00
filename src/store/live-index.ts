// Which journal records are still live, and where they are on disk.
//
// It models the synced journal only: the journal applies a record after its
// covering fdatasync, so a record that failed to reach the disk never enters it.
// It answers: what recovery hands the broker (configChanges, forEachMessage),
// where a paged body is (messageLocation), and which segments compaction may copy
// from or delete (SegmentStats, liveIn).
//
// Liveness: a declare lives until its delete (or a newer declare of the same
// name, which replaces it, as the broker does), a binding until unbind or the
// delete of its queue or exchange, an enqueue until its dequeue or its queue's
// delete, a transaction while any enqueue in it lives, the newest epoch and the
// newest LSN reservation while nothing newer exists. DR (secondary side): a
// dr-transaction lives like a transaction and also while it holds the newest
// source position of one of its queues; the newest dr-queue or dr-role record per queue lives.
// The newest queue-dedup (a queue's changed duplicate-detection settings) of a queue
// lives until the queue is deleted or declared again, and so does a queue-consumed
// (an auto-delete queue's first consumer).
// And the change with the highest LSN lives, whatever it is: it is the journal's
// position, which an HA backup resumes from after a restart.
//
// Memory (see docs/journal.md): messages are rows of an IdTable per queue (LSN,
// location, and the fields a restart needs to rebuild the queue), about 52 bytes
// each; a record that holds several messages (a transaction) is only its rows,
// each knowing how many share the frame. Other records are few and are objects
// (DiskRecord) with their bodies.
//
// Tombstones: a dequeue or delete is dead itself, but while a record it killed is
// still on disk it must stay too, or replay would resurrect that record. So each
// segment remembers the segments holding records its tombstones killed
// (`tombTargets`) and may only go once those are gone. A record copied forward by
// compaction leaves a stale copy behind until its old segment is deleted; instead
// of a list of segments per record, the segment it was copied into remembers where
// from (`copiedFrom`, kept transitive over segments still on disk), and a kill
// names those segments too.
//
// Order: at run time records arrive in LSN order. Recovery applies them in file
// order, where a compaction copy is an older LSN in a newer segment: apply()
// recognises a record it holds already by its LSN and moves its home to the copy
// (the later copy is the one that counts). A copy is always written before any
// record that kills it, and declares only kill what is older than themselves, so
// file order reaches the same state as LSN order.

import type { Change, MessageRecord } from '../broker/changes.js';
import { bodySize, PAGED_DURABLE, PAGED_SUBJECT, type PagedFields, type PagedRun } from '../broker/paged-message.js';
import { IdTable, type ColumnType, type IdChunk } from '../util/id-table.js';
import type { RecordBody } from './record-codec.js';

export interface Location {
  seg: number;
  offset: number;
  /** Frame bytes. */
  size: number;
}

/** A record that is not a message (declares, bindings, epoch, DR state, the newest change). */
export interface DiskRecord {
  lsn: number;
  kind: RecordBody['kind'];
  /** Where the copy that counts for liveness is (the newest copy, maybe not synced yet). */
  home: Location;
  /** The newest synced copy. */
  at: Location;
  liveRefs: number;
  /** What recovery hands the broker (a dr-transaction without its changes); undefined for a pin of the newest change only. */
  body: RecordBody | undefined;
}

export interface SegmentStats {
  id: number;
  /** Synced frame bytes in the segment. */
  bytes: number;
  liveBytes: number;
  /** Live records (message rows and records) homed here. */
  liveCount: number;
  tombTargets: Set<number>;
  copiedFrom: Set<number>;
}

/** A live frame homed in a segment, for compaction: its record object and/or its message rows. */
export interface LiveFrame {
  lsn: number;
  home: Location;
  rec: DiskRecord | undefined;
  messages: Array<{ queue: string; id: number }>;
}

// Message row columns.
const LSN = 0;
const EXPIRES = 1;
const SEG = 2;
const OFF = 3;
const FSIZE = 4;
const BODY = 5;
const DC = 6;
const HLEN = 7;
const PARTS = 8;
const PRIO = 9;
const FLAGS = 10;
export const MESSAGE_COLUMNS: readonly ColumnType[] = ['f64', 'f64', 'u32', 'u32', 'u32', 'u32', 'u32', 'u32', 'u16', 'u8', 'u8'];
const F_DURABLE = PAGED_DURABLE;
const F_SUBJECT = PAGED_SUBJECT;

type MessageTable = IdTable<never>;

interface QueueState {
  declares: DiskRecord[];
  /** LSN of the newest declare: messages older than it belong to an earlier queue of that name. */
  declaredAt: number;
  messages: MessageTable;
  /** Rows relocated by a compaction copy not synced yet: where they can still be read. */
  readableAt: Map<number, Location>;
}

/** The state a checkpoint holds (see checkpoint.ts); message chunks are frozen until release(). */
export interface IndexSnapshot {
  epoch: number;
  reservedUpTo: number;
  newest: { lsn: number; home: Location } | undefined;
  records: Array<{ lsn: number; home: Location; body: RecordBody }>;
  segments: Array<{ id: number; tombTargets: number[]; copiedFrom: number[] }>;
  queues: Array<{ name: string; declaredAt: number; chunks: IdChunk<never>[] }>;
  release(): void;
}

const bindingKey = (exchange: string, queue: string, key: string): string => `${exchange}\u0000${queue}\u0000${key}`;
const share = (size: number, parts: number): number => Math.floor(size / Math.max(1, parts));

export class LiveIndex {
  readonly segments = new Map<number, SegmentStats>();
  private readonly queues = new Map<string, QueueState>();
  private readonly exchanges = new Map<string, DiskRecord[]>();
  private readonly bindings = new Map<string, { exchange: string; queue: string; rec: DiskRecord }>();
  /** Binding keys by queue: a queue's delete or redeclare visits only its own (durable topic subscriptions are thousands of queues). */
  private readonly bindingsByQueue = new Map<string, Set<string>>();
  /** Non-message records by LSN, to recognise a compaction copy during recovery. */
  private readonly records = new Map<number, DiskRecord>();
  private epochRec: DiskRecord | undefined;
  /** The first 'dr-followed' record: one is enough, the later ones say the same. */
  private drFollowedRec: DiskRecord | undefined;
  private reservationRec: DiskRecord | undefined;
  /** The change with the highest LSN: kept on disk so a restart knows how far the log went. */
  private newestRec: DiskRecord | undefined;
  private readonly drPositionRecs = new Map<string, DiskRecord>();
  private readonly drQueueRecs = new Map<string, DiskRecord>();
  /** The newest duplicate-detection settings change per queue, live until the queue is deleted or declared again. */
  private readonly queueDedupRecs = new Map<string, DiskRecord>();
  /** Per auto-delete queue that had a consumer, that record ('queue-consumed'), live as queueDedupRecs are. */
  private readonly queueConsumedRecs = new Map<string, DiskRecord>();
  epoch = 0;
  reservedUpTo = 0;
  /** Highest message id ever applied (the broker continues above it). */
  maxMessageId = 0;

  segment(id: number): SegmentStats {
    let s = this.segments.get(id);
    if (!s) {
      s = { id, bytes: 0, liveBytes: 0, liveCount: 0, tombTargets: new Set(), copiedFrom: new Set() };
      this.segments.set(id, s);
    }
    return s;
  }

  /** Apply one synced record found at `home` (a record applied before at another place is a compaction copy). */
  apply(lsn: number, body: RecordBody, home: Location): void {
    this.segment(home.seg).bytes += home.size;
    switch (body.kind) {
      case 'queue-declare': {
        if (this.duplicate(lsn, home)) break;
        const q = this.queues.get(body.name);
        if (q && q.declaredAt > lsn) break; // replaced already (file order): dead
        const rec = this.record(lsn, body, home);
        // Even with no state left for the old queue: its declare's segment may be gone
        // (the target of a kill goes first) while bindings it had are still read.
        this.replaceQueue(q, rec, body.name);
        const state = this.queue(body.name);
        state.declares.push(rec);
        state.declaredAt = lsn;
        this.ref(rec);
        break;
      }
      case 'queue-delete': {
        const q = this.queues.get(body.name);
        if (q) {
          this.dropQueueState(q, home.seg, lsn);
          if (q.messages.length === 0 && q.declares.length === 0) this.queues.delete(body.name);
        }
        this.unbindQueue(body.name, lsn, home.seg);
        this.killQueueDedup(body.name, lsn, home.seg);
        this.killQueueConsumed(body.name, lsn, home.seg);
        break;
      }
      case 'exchange-declare': {
        if (this.duplicate(lsn, home)) break;
        const list = this.exchanges.get(body.name) ?? [];
        if (list.some((d) => d.lsn > lsn)) break; // replaced already (file order): dead
        // A declare over an existing exchange replaces it, as the broker does: the old
        // declare and its bindings die (a bind made after this one is then live, not
        // taken for a repeat of an old one), also bindings whose declare left the files.
        for (const d of list) this.kill(d, home.seg);
        for (const [k, b] of this.bindings) if (b.exchange === body.name && b.rec.lsn < lsn) this.unbind(k, home.seg);
        const rec = this.record(lsn, body, home);
        this.exchanges.set(body.name, [rec]);
        this.ref(rec);
        break;
      }
      case 'exchange-delete': {
        const list = this.exchanges.get(body.name) ?? [];
        for (const d of list.filter((d) => d.lsn < lsn)) this.kill(d, home.seg);
        const kept = list.filter((d) => d.lsn > lsn);
        if (kept.length > 0) this.exchanges.set(body.name, kept);
        else this.exchanges.delete(body.name);
        for (const [k, b] of this.bindings) if (b.exchange === body.name && b.rec.lsn < lsn) this.unbind(k, home.seg);
        break;
      }
      case 'bind': {
        if (this.duplicate(lsn, home)) break;
        // Older than its queue's or exchange's newest declare, which replaced it and its
        // bindings: a compaction copy that file order brings after that declare. Dead.
        if ((this.queues.get(body.queue)?.declaredAt ?? 0) > lsn || this.exchanges.get(body.exchange)?.some((d) => d.lsn > lsn)) break;
        const k = bindingKey(body.exchange, body.queue, body.key);
        // A repeated bind changes nothing: the first one stays the live one.
        if (!this.bindings.has(k)) {
          const rec = this.record(lsn, body, home);
          this.bindings.set(k, { exchange: body.exchange, queue: body.queue, rec });
          let keys = this.bindingsByQueue.get(body.queue);
          if (!keys) this.bindingsByQueue.set(body.queue, (keys = new Set()));
          keys.add(k);
          this.ref(rec);
        }
        break;
      }
      case 'unbind': {
        // Only what is older dies: a copy of an unbind (kept as the newest change) that
        // file order brings after a new bind of the same key must not kill it.
        const k = bindingKey(body.exchange, body.queue, body.key);
        if ((this.bindings.get(k)?.rec.lsn ?? Infinity) < lsn) this.unbind(k, home.seg);
        break;
      }
      case 'enqueue':
        this.addMessage(body.queue, body.message, lsn, home, 1);
        break;
      case 'dequeue':
        this.killMessage(body.queue, body.id, home.seg, lsn);
        break;
      case 'transaction':
      case 'dr-transaction': {
        let parts = 0;
        for (const c of body.changes) if (c.kind === 'enqueue') parts++;
        for (const c of body.changes) {
          if (c.kind === 'enqueue') this.addMessage(c.queue, c.message, lsn, home, parts);
          else this.killMessage(c.queue, c.id, home.seg, lsn);
        }
        if (body.kind === 'dr-transaction' && body.queues.length > 0) {
          // Only the newest position counts (replay is in LSN order), so no tombstone.
          if (this.duplicate(lsn, home)) break;
          const rec = this.record(lsn, { kind: 'dr-transaction', queues: body.queues, lsn: body.lsn, time: body.time, changes: [] }, home);
          for (const q of body.queues) this.keepNewest(this.drPositionRecs, q, rec);
          if (rec.liveRefs === 0) this.records.delete(lsn);
        }
        break;
      }
      case 'queue-dedup': {
        if (this.duplicate(lsn, home)) break;
        // Older than the queue's newest declare: about an earlier queue of that name (a
        // compaction copy file order brings after that declare). Dead. A queue not known
        // yet is not a dead one: its declare may be a copy further on in file order (its
        // segment compacted away), and it kills only what is older than itself. Taken
        // for dead, a restart lost the change and gave the queue its old settings back.
        if ((this.queues.get(body.name)?.declaredAt ?? 0) > lsn) break;
        const rec = this.record(lsn, body, home);
        this.keepNewest(this.queueDedupRecs, body.name, rec);
        if (rec.liveRefs === 0) this.records.delete(lsn);
        break;
      }
      case 'queue-consumed': {
        if (this.duplicate(lsn, home)) break;
        // Older than the queue's newest declare: about an earlier queue of that name (a
        // compaction copy file order brings after that declare). Dead. A queue not known
        // yet is not a dead one: its declare may be a copy further on in file order, and
        // it kills only what is older than itself.
        if ((this.queues.get(body.name)?.declaredAt ?? 0) > lsn) break;
        const rec = this.record(lsn, body, home);
        this.keepNewest(this.queueConsumedRecs, body.name, rec);
        if (rec.liveRefs === 0) this.records.delete(lsn);
        break;
      }
      case 'dr-queue':
      case 'dr-role': {
        if (this.duplicate(lsn, home)) break;
        const rec = this.record(lsn, body, home);
        this.keepNewest(this.drQueueRecs, body.queue, rec);
        if (rec.liveRefs === 0) this.records.delete(lsn);
        break;
      }
      case 'epoch':
        // Only the highest epoch matters, so an older one needs no tombstone.
        if (this.epochRec?.lsn === lsn) this.moveRecord(this.epochRec, home);
        else if (body.epoch >= this.epoch) {
          const rec = this.newRecord(lsn, body, home);
          if (this.epochRec) this.unref(this.epochRec);
          this.epoch = body.epoch;
          this.epochRec = rec;
          this.ref(rec);
        }
        break;
      case 'dr-followed':
        if (this.drFollowedRec?.lsn === lsn) this.moveRecord(this.drFollowedRec, home);
        else if (!this.drFollowedRec) {
          this.drFollowedRec = this.newRecord(lsn, body, home);
          this.ref(this.drFollowedRec);
        }
        break;
      case 'lsn-reservation':
        // Reservations are not changes: their LSN slot may repeat a change's LSN, so they are known by upTo.
        if (this.reservationRec && this.reservationRec.lsn === lsn && body.upTo === this.reservedUpTo) this.moveRecord(this.reservationRec, home);
        else if (body.upTo >= this.reservedUpTo) {
          const rec = this.newRecord(lsn, body, home);
          if (this.reservationRec) this.unref(this.reservationRec);
          this.reservedUpTo = body.upTo;
          this.reservationRec = rec;
          this.ref(rec);
        }
        break;
    }
    if (body.kind !== 'lsn-reservation') this.noteNewest(lsn, body, home);
  }

  /** LSN of the newest change on disk (0 if none). */
  get newestLsn(): number {
    return this.newestRec?.lsn ?? 0;
  }

  /** Live message rows in all queues. */
  get messageCount(): number {
    let n = 0;
    for (const q of this.queues.values()) n += q.messages.length;
    return n;
  }

  /** Is the enqueue of (queue, id) in the record with this LSN still live? Used to filter transactions. */
  isLiveMessage(queue: string, id: number, lsn: number): boolean {
    const t = this.queues.get(queue)?.messages;
    if (!t) return false;
    const pos = t.find(id);
    return pos >= 0 && t.get(pos, LSN) === lsn;
  }

  /** Where the synced journal holds the enqueue of message `id` on `queue`, if it does. */
  messageLocation(queue: string, id: number): Location | undefined {
    const q = this.queues.get(queue);
    if (!q) return undefined;
    const pending = q.readableAt.get(id);
    if (pending) return pending;
    const pos = q.messages.find(id);
    if (pos < 0) return undefined;
    return { seg: q.messages.get(pos, SEG), offset: q.messages.get(pos, OFF), size: q.messages.get(pos, FSIZE) };
  }

  /** Count the bytes of a synced copy written by compaction. */
  addCopyBytes(loc: Location): void {
    this.segment(loc.seg).bytes += loc.size;
  }

  /** May this segment be deleted: nothing live in it, and every record its tombstones killed is gone. */
  isDeletable(id: number): boolean {
    const s = this.segments.get(id);
    if (!s) return true;
    if (s.liveCount > 0) return false;
    for (const t of s.tombTargets) if (this.segments.has(t)) return false;
    return true;
  }

  /** The segment file is gone: forget it, and let segments copied from it name its sources instead. */
  dropSegment(id: number): void {
    const gone = this.segments.get(id);
    this.segments.delete(id);
    for (const s of this.segments.values()) {
      if (!s.copiedFrom.delete(id)) continue;
      if (gone) for (const from of gone.copiedFrom) if (this.segments.has(from)) s.copiedFrom.add(from);
    }
  }

  /** Live frames homed in `id`, in LSN order (compaction copies them forward). */
  liveIn(id: number): LiveFrame[] {
    // Frames that several rows share (a transaction's messages) or that hold a record
    // go through the map; a frame of one message alone is made directly (most are).
    const byOffset = new Map<number, LiveFrame>();
    const single: LiveFrame[] = [];
    const frame = (lsn: number, home: Location): LiveFrame => {
      let f = byOffset.get(home.offset);
      if (!f) byOffset.set(home.offset, (f = { lsn, home, rec: undefined, messages: [] }));
      return f;
    };
    const s = this.segments.get(id);
    if (!s || s.liveCount === 0) return [];
    for (const rec of this.liveRecords()) if (rec.home.seg === id) frame(rec.lsn, rec.home).rec = rec;
    const withRecord = byOffset.size > 0;
    // Every row of every queue is looked at: straight from the chunks' columns (a walk
    // through positions() and a map entry per frame took ~0.4 s for 400k frames, in
    // one go on the event loop).
    for (const [name, q] of this.queues) {
      for (const ch of q.messages.chunkList()) {
        const segs = ch.cols[SEG]!;
        const parts = ch.cols[PARTS]!;
        for (let i = ch.start; i < ch.end; i++) {
          if (segs[i] !== id) continue;
          const offset = ch.cols[OFF]![i]!;
          const lsn = ch.cols[LSN]![i]!;
          const message = { queue: name, id: ch.ids[i]! };
          if (parts[i] === 1 && !(withRecord && byOffset.has(offset))) {
            single.push({ lsn, home: { seg: id, offset, size: ch.cols[FSIZE]![i]! }, rec: undefined, messages: [message] });
          } else {
            frame(lsn, { seg: id, offset, size: ch.cols[FSIZE]![i]! }).messages.push(message);
          }
        }
      }
    }
    for (const f of byOffset.values()) single.push(f);
    return single.sort((a, b) => a.lsn - b.lsn);
  }

  /**
   * Whether a frame liveIn() returned is still live where it was: its record, or one
   * of its messages, still there with the same LSN (compaction copies a segment in
   * slices, and what was live at the start of one may have died by the next).
   */
  stillLive(frame: LiveFrame): boolean {
    const { home } = frame;
    if (frame.rec && frame.rec.liveRefs > 0 && frame.rec.home.seg === home.seg && frame.rec.home.offset === home.offset) return true;
    for (const { queue, id } of frame.messages) {
      const t = this.queues.get(queue)?.messages;
      const pos = t?.find(id) ?? -1;
      if (t && pos >= 0 && t.get(pos, LSN) === frame.lsn && t.get(pos, SEG) === home.seg && t.get(pos, OFF) === home.offset) return true;
    }
    return false;
  }

  /**
   * Compaction wrote a copy of `frame` at `to` (holding `parts` messages): the copy
   * becomes the one that counts. Called when the copy is queued (not synced), so a
   * kill arriving meanwhile already names the new segment; reads keep using the old
   * copy until copySynced(). Returns an undo.
   */
  relocate(frame: LiveFrame, to: Location, parts: number): () => void {
    const from = frame.home;
    this.noteCopied(from.seg, to.seg);
    const rec = frame.rec;
    if (rec) {
      if (rec.liveRefs > 0) this.moveLive(from, to, 1, 1);
      rec.home = to;
    }
    const moved: Array<{ q: QueueState; id: number; parts: number }> = [];
    for (const { queue, id } of frame.messages) {
      const q = this.queues.get(queue);
      const pos = q?.messages.find(id) ?? -1;
      if (!q || pos < 0 || q.messages.get(pos, LSN) !== frame.lsn) continue;
      const t = q.messages;
      const oldParts = t.get(pos, PARTS);
      this.moveLive(from, to, oldParts, parts);
      q.readableAt.set(id, from);
      t.set(pos, SEG, to.seg);
      t.set(pos, OFF, to.offset);
      t.set(pos, FSIZE, to.size);
      t.set(pos, PARTS, parts);
      moved.push({ q, id, parts: oldParts });
    }
    return () => {
      if (rec && rec.home === to) {
        if (rec.liveRefs > 0) this.moveLive(to, from, 1, 1);
        rec.home = from;
      }
      for (const m of moved) {
        const t = m.q.messages;
        const pos = t.find(m.id);
        m.q.readableAt.delete(m.id);
        // Gone meanwhile (a kill), or no longer at the failed copy: nothing to undo.
        if (pos < 0 || t.get(pos, LSN) !== frame.lsn || t.get(pos, SEG) !== to.seg || t.get(pos, OFF) !== to.offset) continue;
        this.moveLive(to, from, parts, m.parts);
        t.set(pos, SEG, from.seg);
        t.set(pos, OFF, from.offset);
        t.set(pos, FSIZE, from.size);
        t.set(pos, PARTS, m.parts);
      }
      // The failed copy's segment stays in copiedFrom: a tombstone waiting on it is merely conservative.
    };
  }

  /** A copy made by relocate() is synced: reads may use it (its old segment may go next). */
  copySynced(frame: LiveFrame, loc: Location): void {
    if (frame.rec && frame.rec.home === loc) frame.rec.at = loc;
    for (const { queue, id } of frame.messages) this.queues.get(queue)?.readableAt.delete(id);
  }

  /**
   * The live non-message records as changes, in LSN order: what recovery hands the
   * broker before the messages (the newest change only pins a position; the LSN
   * reservation is the journal's own).
   */
  configChanges(): Array<{ lsn: number; change: Change }> {
    const out: Array<{ lsn: number; change: Change }> = [];
    for (const rec of this.liveRecords()) {
      if (!rec.body || rec.body.kind === 'lsn-reservation') continue;
      out.push({ lsn: rec.lsn, change: rec.body });
    }
    return out.sort((a, b) => a.lsn - b.lsn);
  }

  /** Queues that have message rows. */
  messageQueues(): string[] {
    return [...this.queues].filter(([, q]) => q.messages.length > 0).map(([name]) => name);
  }

  /**
   * Every live message of `queue` in id order, as the fields a paged queue row
   * needs (one object, reused: copy what you keep), with its LSN.
   */
  forEachMessage(queue: string, fn: (fields: PagedFields, lsn: number) => void): void {
    const t = this.queues.get(queue)?.messages;
    if (!t) return;
    const f: PagedFields = { id: 0, size: 0, headerLength: 0, durable: true, priority: 0, expiresAt: 0, deliveryCount: 0, hasSubject: false };
    for (const pos of t.positions()) {
      const flags = t.get(pos, FLAGS);
      f.id = t.id(pos);
      f.size = t.get(pos, BODY);
      f.headerLength = t.get(pos, HLEN);
      f.durable = (flags & F_DURABLE) !== 0;
      f.priority = t.get(pos, PRIO);
      f.expiresAt = t.get(pos, EXPIRES);
      f.deliveryCount = t.get(pos, DC);
      f.hasSubject = (flags & F_SUBJECT) !== 0;
      fn(f, t.get(pos, LSN));
    }
  }

  /**
   * Every live message of `queue` in id order, a chunk of rows at a time, as views
   * into the index's own arrays (valid until the index changes: copy them now).
   */
  forEachMessageRun(queue: string, fn: (run: PagedRun) => void): void {
    const t = this.queues.get(queue)?.messages;
    if (!t) return;
    for (const ch of t.chunkList()) {
      const a = ch.start;
      const b = ch.end;
      const c = ch.cols;
      fn({
        count: b - a,
        ids: ch.ids.subarray(a, b),
        size: (c[BODY] as Uint32Array).subarray(a, b),
        expiresAt: (c[EXPIRES] as Float64Array).subarray(a, b),
        deliveryCount: (c[DC] as Uint32Array).subarray(a, b),
        headerLength: (c[HLEN] as Uint32Array).subarray(a, b),
        priority: (c[PRIO] as Uint8Array).subarray(a, b),
        flags: (c[FLAGS] as Uint8Array).subarray(a, b),
      });
    }
  }

  filterTransaction<T extends Extract<Change, { kind: 'transaction' | 'dr-transaction' }>>(body: T, lsn: number): T {
    return { ...body, changes: body.changes.filter((c) => c.kind === 'enqueue' && this.isLiveMessage(c.queue, c.message.id, lsn)) };
  }

  /**
   * Where each live message row and record is homed, for a check after recovery:
   * a home in a segment that is not on disk would be a body that cannot be read.
   */
  homesOutside(present: (seg: number) => boolean): number {
    let n = 0;
    for (const rec of this.liveRecords()) if (!present(rec.home.seg)) n++;
    for (const q of this.queues.values()) {
      for (const ch of q.messages.chunkList()) {
        const segs = ch.cols[SEG]!;
        let last = -1;
        for (let i = ch.start; i < ch.end; i++) {
          const seg = segs[i]!;
          if (seg === last) continue; // rows of one segment come in runs: ask once per run
          if (!present(seg)) {
            n++;
            continue;
          }
          last = seg;
        }
      }
    }
    return n;
  }

  // ---- checkpoint -----------------------------------------------------------

  /**
   * The state a checkpoint holds, taken now, synchronously, while no compaction
   * copy is in flight (every live record has one synced home). Message tables are
   * frozen, not copied: call release() once written.
   */
  snapshot(): IndexSnapshot {
    for (const q of this.queues.values()) {
      if (q.readableAt.size > 0) throw new Error('index snapshot while a compaction copy is in flight');
    }
    const frozen: Array<{ table: MessageTable; chunks: IdChunk<never>[] }> = [];
    const queues = [...this.queues].map(([name, q]) => {
      const chunks = q.messages.freeze();
      frozen.push({ table: q.messages, chunks });
      return { name, declaredAt: q.declaredAt, chunks };
    });
    const records: IndexSnapshot['records'] = [];
    for (const rec of this.liveRecords()) if (rec.body) records.push({ lsn: rec.lsn, home: { ...rec.home }, body: rec.body });
    records.sort((a, b) => a.lsn - b.lsn);
    let released = false;
    return {
      epoch: this.epoch,
      reservedUpTo: this.reservedUpTo,
      newest: this.newestRec ? { lsn: this.newestRec.lsn, home: { ...this.newestRec.home } } : undefined,
      records,
      segments: [...this.segments.values()].map((s) => ({ id: s.id, tombTargets: [...s.tombTargets], copiedFrom: [...s.copiedFrom] })),
      queues,
      release: () => {
        if (released) return;
        released = true;
        for (const { table, chunks } of frozen) table.thaw(chunks);
      },
    };
  }

  /** Rebuild an index from a checkpoint's state (its chunks are adopted as they are). */
  static restore(state: Omit<IndexSnapshot, 'release'>): LiveIndex {
    const index = new LiveIndex();
    for (const r of state.records) index.apply(r.lsn, r.body, r.home);
    // apply() counted the records' bytes; byte counts come from the files (recovery sets them).
    for (const s of index.segments.values()) s.bytes = 0;
    index.epoch = Math.max(index.epoch, state.epoch);
    index.reservedUpTo = Math.max(index.reservedUpTo, state.reservedUpTo);
    if (state.newest) {
      if (index.newestRec) index.unref(index.newestRec);
      const existing = index.records.get(state.newest.lsn);
      index.newestRec = existing ?? index.newRecord(state.newest.lsn, undefined, state.newest.home);
      index.ref(index.newestRec);
    }
    for (const { name, declaredAt, chunks } of state.queues) {
      const q = index.queue(name);
      q.declaredAt = Math.max(q.declaredAt, declaredAt);
      q.messages.adopt(chunks);
      // Live counts per segment, straight from the columns (millions of rows).
      for (const ch of chunks) {
        const segs = ch.cols[SEG]!;
        const sizes = ch.cols[FSIZE]!;
        const parts = ch.cols[PARTS]!;
        let stats: SegmentStats | undefined;
        for (let i = ch.start; i < ch.end; i++) {
          const seg = segs[i]!;
          if (stats?.id !== seg) stats = index.segment(seg);
          stats.liveCount++;
          stats.liveBytes += share(sizes[i]!, parts[i]!);
        }
        if (ch.end > ch.start && ch.ids[ch.end - 1]! > index.maxMessageId) index.maxMessageId = ch.ids[ch.end - 1]!;
      }
    }
    for (const s of state.segments) {
      const stats = index.segment(s.id);
      for (const t of s.tombTargets) stats.tombTargets.add(t);
      for (const c of s.copiedFrom) stats.copiedFrom.add(c);
    }
    return index;
  }

  // ---- internals ----------------------------------------------------------

  private queue(name: string): QueueState {
    let q = this.queues.get(name);
    if (!q) this.queues.set(name, (q = { declares: [], declaredAt: 0, messages: new IdTable<never>(MESSAGE_COLUMNS), readableAt: new Map() }));
    return q;
  }

  private newRecord(lsn: number, body: RecordBody | undefined, home: Location): DiskRecord {
    // One shape for every record (no property added or deleted later): V8 keeps them small.
    return { lsn, kind: body?.kind ?? 'dequeue', home, at: home, liveRefs: 0, body };
  }

  /** A new non-message record, known by its LSN from now on. */
  private record(lsn: number, body: RecordBody, home: Location): DiskRecord {
    const rec = this.newRecord(lsn, body, home);
    this.records.set(lsn, rec);
    return rec;
  }

  /** A record with this LSN is known already: this is a compaction copy of it; move its home here. */
  private duplicate(lsn: number, home: Location): boolean {
    const rec = this.records.get(lsn);
    if (!rec) return false;
    this.moveRecord(rec, home);
    return true;
  }

  private moveRecord(rec: DiskRecord, home: Location): void {
    if (rec.home.seg === home.seg && rec.home.offset === home.offset) return;
    this.noteCopied(rec.home.seg, home.seg);
    if (rec.liveRefs > 0) this.moveLive(rec.home, home, 1, 1);
    rec.home = home;
    rec.at = home;
  }

  private *liveRecords(): IterableIterator<DiskRecord> {
    const seen = new Set<DiskRecord>();
    const all: Array<DiskRecord | undefined> = [this.epochRec, this.drFollowedRec, this.reservationRec, this.newestRec];
    for (const q of this.queues.values()) all.push(...q.declares);
    for (const list of this.exchanges.values()) all.push(...list);
    for (const b of this.bindings.values()) all.push(b.rec);
    all.push(...this.drPositionRecs.values(), ...this.drQueueRecs.values(), ...this.queueDedupRecs.values(), ...this.queueConsumedRecs.values());
    for (const rec of all) {
      if (!rec || rec.liveRefs <= 0 || seen.has(rec)) continue;
      seen.add(rec);
      yield rec;
    }
  }

  private noteNewest(lsn: number, body: RecordBody, home: Location): void {
    const cur = this.newestRec;
    if (cur && cur.lsn === lsn) {
      // A compaction copy of the newest change (or the record itself, just applied).
      if (cur.body === undefined) this.moveRecord(cur, home);
      return;
    }
    if (cur && lsn < cur.lsn) return;
    // An HA backup resumes from this position after a restart (see journal.ts):
    // compaction must not delete it, even when the change itself is dead (a dequeue).
    const rec = this.records.get(lsn) ?? this.newRecord(lsn, undefined, home);
    if (rec.body === undefined) rec.kind = body.kind;
    if (cur) this.unref(cur);
    this.newestRec = rec;
    this.ref(rec);
  }

  private addMessage(queue: string, m: MessageRecord, lsn: number, home: Location, parts: number): void {
    const q = this.queue(queue);
    if (lsn < q.declaredAt) return; // an earlier queue of this name (file order): dead
    const t = q.messages;
    let pos = t.find(m.id);
    if (pos >= 0) {
      const had = t.get(pos, LSN);
      if (had === lsn) {
        // A compaction copy of this row's record: the later copy counts.
        const from: Location = { seg: t.get(pos, SEG), offset: t.get(pos, OFF), size: t.get(pos, FSIZE) };
        if (from.seg === home.seg && from.offset === home.offset) return;
        this.noteCopied(from.seg, home.seg);
        this.moveLive(from, home, t.get(pos, PARTS), parts);
        t.set(pos, SEG, home.seg);
        t.set(pos, OFF, home.offset);
        t.set(pos, FSIZE, home.size);
        t.set(pos, PARTS, parts);
        return;
      }
      if (had > lsn) return; // older than what we hold: dead
      // The same id again (a replayed copy from elsewhere): the older one dies.
      this.killRow(q, pos, home.seg);
      pos = -1;
    }
    pos = t.insert(m.id);
    t.set(pos, LSN, lsn);
    t.set(pos, EXPIRES, m.expiresAt);
    t.set(pos, SEG, home.seg);
    t.set(pos, OFF, home.offset);
    t.set(pos, FSIZE, home.size);
    t.set(pos, BODY, bodySize(m));
    t.set(pos, DC, m.deliveryCount);
    t.set(pos, HLEN, m.headerLength);
    t.set(pos, PARTS, parts);
    t.set(pos, PRIO, m.priority);
    t.set(pos, FLAGS, (m.durable ? F_DURABLE : 0) | (m.subject !== undefined ? F_SUBJECT : 0));
    this.addLive(home.seg, share(home.size, parts));
    if (m.id > this.maxMessageId) this.maxMessageId = m.id;
  }

  private killMessage(queue: string, id: number, killerSeg: number, lsn: number): void {
    const q = this.queues.get(queue);
    if (!q) return; // not journaled (non-durable) or already gone
    const pos = q.messages.find(id);
    // Only an older enqueue dies (a dequeue copied forward as the newest change may
    // come after a newer enqueue of the same id in file order).
    if (pos < 0 || q.messages.get(pos, LSN) > lsn) return;
    this.killRow(q, pos, killerSeg);
  }

  /** Kill a message row: uncount it, and make the killer's segment wait for its copies. */
  private killRow(q: QueueState, pos: number, killerSeg: number): number {
    const t = q.messages;
    const seg = t.get(pos, SEG);
    this.subLive(seg, share(t.get(pos, FSIZE), t.get(pos, PARTS)));
    this.tomb(killerSeg, seg);
    const pending = q.readableAt.get(t.id(pos));
    if (pending) {
      this.tomb(killerSeg, pending.seg);
      q.readableAt.delete(t.id(pos));
    }
    return t.removeAt(pos);
  }

  /** Everything of a queue older than `lsn` dies (its delete, or a newer declare). */
  private dropQueueState(q: QueueState, killerSeg: number, lsn: number): void {
    for (const d of q.declares.filter((d) => d.lsn < lsn)) this.kill(d, killerSeg);
    q.declares = q.declares.filter((d) => d.lsn > lsn);
    const t = q.messages;
    for (let pos = t.first(); pos >= 0; ) pos = t.get(pos, LSN) < lsn ? this.killRow(q, pos, killerSeg) : t.next(pos);
  }

  /** A declare of a queue that exists: the broker drops the old queue (messages, bindings) and makes a new one. */
  private replaceQueue(q: QueueState | undefined, rec: DiskRecord, name: string): void {
    if (q) this.dropQueueState(q, rec.home.seg, rec.lsn);
    this.killQueueDedup(name, rec.lsn, rec.home.seg);
    this.killQueueConsumed(name, rec.lsn, rec.home.seg);
    this.unbindQueue(name, rec.lsn, rec.home.seg);
  }

  /** The queue's bindings older than `lsn` die (in bind order, as a scan of all bindings met them). */
  private unbindQueue(name: string, lsn: number, killerSeg: number): void {
    const keys = this.bindingsByQueue.get(name);
    if (!keys) return;
    // unbind() deletes from this set; a Set iterator is safe against deleting the entry it is on.
    for (const k of keys) if (this.bindings.get(k)!.rec.lsn < lsn) this.unbind(k, killerSeg);
  }

  /** A queue's dedup settings change dies with the queue (a delete, or a declare that replaces it). */
  private killQueueDedup(name: string, lsn: number, killerSeg: number): void {
    const d = this.queueDedupRecs.get(name);
    if (!d || d.lsn > lsn) return;
    this.queueDedupRecs.delete(name);
    this.kill(d, killerSeg);
  }

  /** A queue's first-consumer record dies with the queue (a delete, or a declare that replaces it). */
  private killQueueConsumed(name: string, lsn: number, killerSeg: number): void {
    const d = this.queueConsumedRecs.get(name);
    if (!d || d.lsn > lsn) return;
    this.queueConsumedRecs.delete(name);
    this.kill(d, killerSeg);
  }

  private keepNewest(map: Map<string, DiskRecord>, key: string, rec: DiskRecord): void {
    const old = map.get(key);
    if (old && old.lsn > rec.lsn) return;
    if (old) this.unref(old);
    map.set(key, rec);
    this.ref(rec);
  }

  private unbind(key: string, killerSeg: number): void {
    const b = this.bindings.get(key);
    if (!b) return;
    this.bindings.delete(key);
    const keys = this.bindingsByQueue.get(b.queue);
    keys?.delete(key);
    if (keys?.size === 0) this.bindingsByQueue.delete(b.queue);
    this.kill(b.rec, killerSeg);
  }

  private ref(rec: DiskRecord): void {
    if (rec.liveRefs++ === 0) this.addLive(rec.home.seg, rec.home.size);
  }

  private unref(rec: DiskRecord): void {
    if (rec.liveRefs <= 0) return;
    if (--rec.liveRefs === 0) {
      this.subLive(rec.home.seg, rec.home.size);
      if (this.records.get(rec.lsn) === rec) this.records.delete(rec.lsn);
    }
  }

  private kill(target: DiskRecord, killerSeg: number): void {
    this.unref(target);
    this.tomb(killerSeg, target.home.seg);
  }

  /** The killer's segment may only go once the target's segment, and those it was copied from, are gone. */
  private tomb(killerSeg: number, targetSeg: number): void {
    const killer = this.segment(killerSeg);
    if (targetSeg !== killerSeg) killer.tombTargets.add(targetSeg);
    const from = this.segments.get(targetSeg)?.copiedFrom;
    if (from) for (const s of from) if (s !== killerSeg) killer.tombTargets.add(s);
  }

  /** A record of segment `from` was copied into `to`: `to` now stands for `from`'s stale copies too. */
  private noteCopied(from: number, to: number): void {
    if (from === to) return;
    const target = this.segment(to);
    target.copiedFrom.add(from);
    const earlier = this.segments.get(from)?.copiedFrom;
    if (earlier) for (const s of earlier) if (s !== to) target.copiedFrom.add(s);
  }

  private addLive(seg: number, bytes: number): void {
    const s = this.segment(seg);
    s.liveCount++;
    s.liveBytes += bytes;
  }

  private subLive(seg: number, bytes: number): void {
    const s = this.segments.get(seg);
    if (!s) return;
    s.liveCount--;
    s.liveBytes -= bytes;
  }

  private moveLive(from: Location, to: Location, fromParts: number, toParts: number): void {
    this.subLive(from.seg, share(from.size, fromParts));
    this.addLive(to.seg, share(to.size, toParts));
  }

}

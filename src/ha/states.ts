// The HA states of a broker (names as qpid-ha users know them) and the one
// table of allowed transitions. An illegal transition is a bug or a split brain
// in the making: it raises IllegalTransition, which stops the broker.

export const HaState = {
  standalone: 'standalone',
  joining: 'joining',
  catchup: 'catchup',
  ready: 'ready',
  recovering: 'recovering',
  active: 'active',
} as const;
export type HaState = (typeof HaState)[keyof typeof HaState];

export const haStates: readonly HaState[] = Object.values(HaState);

export function isHaState(value: unknown): value is HaState {
  return typeof value === 'string' && (haStates as readonly string[]).includes(value);
}

const allowed: Record<HaState, readonly HaState[]> = {
  standalone: [],
  // A backup looks for the primary, copies its state, and is ready; promotion
  // of a joining broker is allowed only on a brand-new cluster (checked by the caller).
  joining: ['catchup', 'recovering'],
  // Losing the primary mid-copy sends a backup back to looking.
  catchup: ['ready', 'joining'],
  // A ready backup that loses the primary stays ready (it keeps its data and is
  // promotable); it catches up again when it attaches to the new primary. One the
  // primary dropped (too slow) is no longer up to date: back to joining.
  ready: ['catchup', 'recovering', 'joining'],
  recovering: ['active'],
  // An active primary never becomes a backup in place: it is restarted as one.
  active: [],
};

export function isPrimaryState(state: HaState): boolean {
  return state === 'recovering' || state === 'active';
}

/** Backups refuse clients; the primary and a standalone broker serve them. */
export function servesClients(state: HaState): boolean {
  return state === 'standalone' || isPrimaryState(state);
}

export class IllegalTransition extends Error {
  readonly code = 'TANDEM_ERR_HA_ILLEGAL_TRANSITION';
  constructor(
    readonly from: HaState,
    readonly to: HaState,
  ) {
    super(`illegal HA transition ${from} -> ${to}; stopping the broker rather than risk data`);
    this.name = 'IllegalTransition';
  }
}

export type HaStatusEvent = { type: 'state'; from: HaState; to: HaState; reason: string };

/** Holds the current state; every change goes through the transition table. */
export class HaStateMachine {
  private current: HaState;
  private readonly listeners: Array<(e: HaStatusEvent) => void> = [];

  constructor(initial: HaState) {
    this.current = initial;
  }

  get state(): HaState {
    return this.current;
  }

  onChange(listener: (e: HaStatusEvent) => void): void {
    this.listeners.push(listener);
  }

  /** Move to `to`; staying in the same state is a no-op. */
  transition(to: HaState, reason: string): void {
    const from = this.current;
    if (from === to) return;
    if (!allowed[from].includes(to)) throw new IllegalTransition(from, to);
    this.current = to;
    for (const l of this.listeners) l({ type: 'state', from, to, reason });
  }
}

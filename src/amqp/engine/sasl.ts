// The SASL layer (spec 5.3), both roles, as two small state machines that only
// see decoded SASL frames and say what to send. The server offers ANONYMOUS,
// PLAIN (checked by the host's async verifier) and EXTERNAL (the identity a
// verified TLS client certificate gave); the client picks the first of
// EXTERNAL, PLAIN, ANONYMOUS that it may use and the server offers.
import type { Composite } from './composite.js';
import { AmqpError, Condition } from './errors.js';
import { describedList } from './performative.js';
import type { AmqpValue } from './types.js';

/** sasl-outcome codes (5.3.3.6). */
export const SaslCode = { ok: 0, auth: 1, sys: 2, sysPerm: 3, sysTemp: 4 } as const;

export interface SaslServerOptions {
  /** Accept ANONYMOUS (the identity is 'anonymous'). */
  anonymous?: boolean;
  /**
   * Check a PLAIN login; resolves with the identity logged in as, or undefined to refuse.
   * `signal` aborts once the socket is gone: a check nobody waits for should stop
   * (a queued hash, a throttle's wait), or it keeps the connection and its unread bytes.
   */
  plain?: (user: string, password: string, authzid: string, signal: AbortSignal) => Promise<string | undefined>;
  /** The user a verified TLS client certificate names: EXTERNAL is offered with it. */
  externalIdentity?: string;
  /**
   * Or a check of an EXTERNAL login (offered when given): the host maps the
   * certificate to a user and decides, given the authorization identity the
   * client asked for ('' for none); resolves with the identity, or undefined to refuse.
   */
  external?: (authzid: string, signal: AbortSignal) => Promise<string | undefined>;
}

export interface SaslClientOptions {
  user?: string;
  password?: string;
  /** Log in as the identity of our TLS client certificate (EXTERNAL). */
  external?: boolean;
  /** The mechanisms we may use, in our order of preference; default EXTERNAL (if external), PLAIN (if a user), ANONYMOUS. */
  mechanisms?: string[];
}

/** What a SASL machine asks its connection to do next. */
export type SaslStep =
  | { kind: 'send'; frame: AmqpValue }
  | { kind: 'wait'; verdict: Promise<SaslStep[]> }
  | { kind: 'done'; identity: string }
  | { kind: 'failed'; description: string };

/** RFC 4616 caps each of authzid, authcid and password at 255 octets. */
const PLAIN_PART_MAX = 255;

export function offeredMechanisms(o: SaslServerOptions): string[] {
  const out: string[] = [];
  if (o.externalIdentity !== undefined || o.external) out.push('EXTERNAL');
  if (o.plain) out.push('PLAIN');
  if (o.anonymous) out.push('ANONYMOUS');
  return out;
}

/** A sasl-outcome frame's body with this code (SaslCode). */
export const saslOutcome = (code: number): AmqpValue => describedList('sasl-outcome', { code: { type: 'ubyte', value: code } });

/** PLAIN's message, authzid NUL authcid NUL passwd; undefined if it is not that. */
export function parsePlain(response: Buffer): { authzid: string; user: string; password: string } | undefined {
  const first = response.indexOf(0);
  const second = first < 0 ? -1 : response.indexOf(0, first + 1);
  if (second < 0 || response.indexOf(0, second + 1) >= 0) return undefined;
  const authzid = response.subarray(0, first);
  const user = response.subarray(first + 1, second);
  const password = response.subarray(second + 1);
  if (user.length === 0 || authzid.length > PLAIN_PART_MAX || user.length > PLAIN_PART_MAX || password.length > PLAIN_PART_MAX) return undefined;
  return { authzid: authzid.toString('utf8'), user: user.toString('utf8'), password: password.toString('utf8') };
}

export class SaslServer {
  private initSeen = false;

  /** `signal`: aborted when the connection's socket is gone (the host's checks are told to stop). */
  constructor(
    private readonly options: SaslServerOptions,
    private readonly signal: AbortSignal = new AbortController().signal,
  ) {}

  /** The frame that starts the exchange (after the SASL header). */
  mechanisms(): AmqpValue {
    return describedList('sasl-mechanisms', { 'sasl-server-mechanisms': offeredMechanisms(this.options) });
  }

  onFrame(body: Composite): SaslStep[] {
    const name = body.def.name;
    if (name !== 'sasl-init') {
      // A sasl-response could only answer a challenge, and none of our mechanisms sends one.
      throw new AmqpError(Condition.notAllowed, `${name} is not a frame the server takes here`);
    }
    if (this.initSeen) throw new AmqpError(Condition.notAllowed, 'sasl-init received twice');
    this.initSeen = true;
    const mechanism = body.fields.mechanism as string;
    const response = (body.fields['initial-response'] as Buffer | undefined) ?? Buffer.alloc(0);
    if (!offeredMechanisms(this.options).includes(mechanism)) return this.refuse(`mechanism ${JSON.stringify(mechanism.slice(0, 40))} is not offered`);
    if (mechanism === 'ANONYMOUS') return this.accept('anonymous');
    if (mechanism === 'EXTERNAL' && this.options.external) {
      const verdict = this.options.external(response.toString('utf8'), this.signal).then(
        (identity) => (identity === undefined ? this.refuse('authentication failed') : this.accept(identity)),
        () => this.refuse('authentication failed'),
      );
      return [{ kind: 'wait', verdict }];
    }
    if (mechanism === 'EXTERNAL') return this.accept(this.options.externalIdentity!);
    const plain = parsePlain(response);
    if (!plain) return this.refuse('a PLAIN response that is not authzid NUL user NUL password');
    const verdict = this.options.plain!(plain.user, plain.password, plain.authzid, this.signal).then(
      (identity) => (identity === undefined ? this.refuse('authentication failed') : this.accept(identity)),
      () => this.refuse('authentication failed'),
    );
    return [{ kind: 'wait', verdict }];
  }

  private accept(identity: string): SaslStep[] {
    return [{ kind: 'send', frame: saslOutcome(SaslCode.ok) }, { kind: 'done', identity }];
  }

  private refuse(description: string): SaslStep[] {
    return [{ kind: 'send', frame: saslOutcome(SaslCode.auth) }, { kind: 'failed', description }];
  }
}

export class SaslClient {
  private chosen: string | undefined;

  constructor(private readonly options: SaslClientOptions) {}

  get mechanism(): string | undefined {
    return this.chosen;
  }

  onFrame(body: Composite, hostname: string | undefined): SaslStep[] {
    const name = body.def.name;
    if (name === 'sasl-mechanisms') {
      if (this.chosen !== undefined) throw new AmqpError(Condition.notAllowed, 'sasl-mechanisms received twice');
      const offered = body.fields['sasl-server-mechanisms'] as string[];
      const o = this.options;
      const wanted = o.mechanisms ?? [...(o.external ? ['EXTERNAL'] : []), ...(o.user !== undefined ? ['PLAIN'] : []), 'ANONYMOUS'];
      const pick = wanted.find((m) => offered.includes(m));
      if (!pick) return [{ kind: 'failed', description: `No suitable mechanism: the server offers ${offered.join(', ') || 'none'}` }];
      this.chosen = pick;
      const response =
        pick === 'PLAIN' ? Buffer.concat([Buffer.from([0]), Buffer.from(o.user ?? ''), Buffer.from([0]), Buffer.from(o.password ?? '')]) : pick === 'ANONYMOUS' ? Buffer.from('anonymous') : Buffer.alloc(0);
      return [{ kind: 'send', frame: describedList('sasl-init', { mechanism: { type: 'symbol', value: pick }, 'initial-response': response, hostname }) }];
    }
    if (this.chosen === undefined) throw new AmqpError(Condition.notAllowed, `${name} before sasl-mechanisms`);
    if (name === 'sasl-outcome') {
      const code = body.fields.code as number;
      if (code === SaslCode.ok) return [{ kind: 'done', identity: this.options.user ?? '' }];
      return [{ kind: 'failed', description: `SASL ${this.chosen} refused (sasl-outcome code ${code}${code === SaslCode.auth ? ': authentication failed' : ''})` }];
    }
    if (name === 'sasl-challenge') return [{ kind: 'failed', description: `a sasl-challenge, which ${this.chosen} does not use` }];
    throw new AmqpError(Condition.notAllowed, `${name} is not a frame the client takes`);
  }
}

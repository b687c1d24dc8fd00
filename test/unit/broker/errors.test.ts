import { describe, expect, it } from 'vitest';
import { TandemError, isTandemError } from '../../../src/broker/errors.js';
import {
  parseBoolean,
  parseCount,
  parseDuration,
  parseExchangeSettings,
  parseExchangeType,
  parseQueueSettings,
} from '../../../src/broker/settings.js';
import { msg, newBroker, qs, xs } from './helpers.js';

function caught(fn: () => unknown): TandemError {
  try {
    fn();
  } catch (err) {
    if (isTandemError(err)) return err;
    throw new Error(`not a TandemError: ${String(err)}`);
  }
  throw new Error('did not throw');
}

describe('not-found errors name what is missing', () => {
  const { broker, clock } = newBroker();
  broker.declareQueue('q', qs());
  const cases: Array<[string, () => unknown, string]> = [
    ['queue()', () => broker.queue('ghost-q'), 'ghost-q'],
    ['exchange()', () => broker.exchange('ghost-x'), 'ghost-x'],
    ['deleteQueue', () => broker.deleteQueue('ghost-q2'), 'ghost-q2'],
    ['deleteExchange', () => broker.deleteExchange('ghost-x2'), 'ghost-x2'],
    ['bind to a missing exchange', () => broker.bind('ghost-x3', 'q', 'k'), 'ghost-x3'],
    ['bind of a missing queue', () => broker.bind('amq.direct', 'ghost-q3', 'k'), 'ghost-q3'],
    ['unbind from a missing exchange', () => broker.unbind('ghost-x4', 'q', 'k'), 'ghost-x4'],
    ['publish', () => broker.publish('ghost-addr', msg('x')), 'ghost-addr'],
    ['commit', () => broker.commit([{ address: 'ghost-tx', msg: msg('x') }], []), 'ghost-tx'],
    ['queue alternate', () => broker.declareQueue('q2', qs({ alternateExchange: 'ghost-alt' })), 'ghost-alt'],
    ['exchange alternate', () => broker.declareExchange('x2', 'direct', xs({ alternateExchange: 'ghost-alt2' })), 'ghost-alt2'],
  ];
  for (const [what, fn, name] of cases) {
    it(what, () => {
      const err = caught(fn);
      expect(err.code).toBe('TANDEM_ERR_NOT_FOUND');
      expect(err.condition).toBe('amqp:not-found');
      expect(err.message).toContain(`'${name}'`);
    });
  }
  void clock;
});

describe('broker refusals', () => {
  it('a queue and an exchange cannot share a name', () => {
    const { broker } = newBroker();
    broker.declareQueue('shared', qs());
    expect(caught(() => broker.declareExchange('shared', 'direct', xs())).code).toBe('TANDEM_ERR_ALREADY_EXISTS');
    broker.declareExchange('ex', 'topic', xs());
    expect(caught(() => broker.declareQueue('ex', qs())).code).toBe('TANDEM_ERR_ALREADY_EXISTS');
    expect(caught(() => broker.declareQueue('amq.direct', qs())).code).toBe('TANDEM_ERR_ALREADY_EXISTS');
  });

  it('re-declaring an exchange with another type is refused; same type returns it', () => {
    const { broker } = newBroker();
    const first = broker.declareExchange('ex', 'topic', xs());
    expect(first.created).toBe(true);
    const again = broker.declareExchange('ex', 'topic', xs());
    expect(again).toEqual({ exchange: first.exchange, created: false });
    expect(caught(() => broker.declareExchange('ex', 'direct', xs())).code).toBe('TANDEM_ERR_ALREADY_EXISTS');
  });

  it('built-in exchanges cannot be deleted', () => {
    const { broker } = newBroker();
    for (const name of ['amq.direct', 'amq.topic', 'amq.fanout', 'amq.match']) {
      const err = caught(() => broker.deleteExchange(name));
      expect(err.code).toBe('TANDEM_ERR_PRECONDITION');
      expect(err.message).toContain(name);
      expect(broker.exchanges.has(name)).toBe(true);
    }
  });

  it('an exchange used as alternate cannot be deleted', () => {
    const { broker } = newBroker();
    broker.declareExchange('alt', 'fanout', xs());
    broker.declareExchange('user', 'direct', xs({ alternateExchange: 'alt' }));
    let err = caught(() => broker.deleteExchange('alt'));
    expect(err.code).toBe('TANDEM_ERR_PRECONDITION');
    expect(err.message).toContain('user');
    broker.deleteExchange('user');
    broker.declareQueue('q', qs({ alternateExchange: 'alt' }));
    err = caught(() => broker.deleteExchange('alt'));
    expect(err.code).toBe('TANDEM_ERR_PRECONDITION');
    expect(err.message).toContain("'q'");
    broker.deleteQueue('q');
    broker.deleteExchange('alt');
    expect(broker.exchanges.has('alt')).toBe(false);
  });

  it('bad names are refused', () => {
    const { broker } = newBroker();
    for (const name of ['', 'x'.repeat(256), 'a\nb', 'tab\there']) {
      expect(caught(() => broker.declareQueue(name, qs())).code).toBe('TANDEM_ERR_INVALID_ARGUMENT');
      expect(caught(() => broker.declareExchange(name, 'direct', xs())).code).toBe('TANDEM_ERR_INVALID_ARGUMENT');
    }
    broker.declareQueue('x'.repeat(255), qs());
  });

  it('an epoch must go up', () => {
    const { broker } = newBroker();
    broker.raiseEpoch(1);
    expect(caught(() => broker.raiseEpoch(1)).code).toBe('TANDEM_ERR_INVALID_ARGUMENT');
  });

  it('errors serialise with code and condition', () => {
    const err = caught(() => newBroker().broker.queue('nope'));
    expect(err.toJSON()).toEqual({ code: 'TANDEM_ERR_NOT_FOUND', condition: 'amqp:not-found', message: err.message });
    expect(err.exitCode).toBe(4);
  });
});

describe('parseQueueSettings', () => {
  it('takes every accepted spelling', () => {
    expect(
      parseQueueSettings({
        durable: 'yes',
        'auto-delete': true,
        'qpid.auto_delete_timeout': 5,
        exclusive: 0,
        'qpid.max_count': '100',
        'max-size': 2048,
        'qpid.policy_type': 'ring',
        'default-ttl': '2s',
        'alternate-exchange': 'amq.fanout',
        'qpid.priorities': 10,
        'qpid.replicate': 'configuration',
        ignored: undefined,
      }),
    ).toEqual({
      durable: true,
      autoDelete: true,
      autoDeleteDelayMs: 5000,
      exclusive: false,
      maxCount: 100,
      maxSize: 2048,
      limitPolicy: 'ring',
      defaultTtlMs: 2000,
      alternateExchange: 'amq.fanout',
      priorities: 10,
      replicate: 'configuration',
      dedupWindow: 0,
      dedupTtlMs: 0,
      dedupKey: '',
    });
    expect(parseQueueSettings({ 'default-ttl': 250 }).defaultTtlMs).toBe(250);
    expect(parseQueueSettings({ 'qpid.default_ttl': 3 }).defaultTtlMs).toBe(3000);
    expect(parseQueueSettings({ priorities: 1 }).priorities).toBe(1);
    expect(parseQueueSettings({}).limitPolicy).toBe('reject');
  });

  const bad: Array<[Record<string, unknown>, string]> = [
    [{ 'no-such-key': 1 }, 'no-such-key'],
    [{ policy: 'drop' }, 'policy'],
    [{ 'qpid.policy_type': 'flow_to_disk' }, 'qpid.policy_type'],
    [{ replicate: 'everything' }, 'replicate'],
    [{ 'qpid.replicate': true }, 'qpid.replicate'],
    [{ priorities: 0 }, 'priorities'],
    [{ 'qpid.priorities': 11 }, 'qpid.priorities'],
    [{ priorities: 2.5 }, 'priorities'],
    [{ 'max-count': -1 }, 'max-count'],
    [{ 'qpid.max_count': '-5' }, 'qpid.max_count'],
    [{ 'max-size': 'big' }, 'max-size'],
    [{ 'qpid.max_size': -0.5 }, 'qpid.max_size'],
    [{ durable: 'maybe' }, 'durable'],
    [{ 'default-ttl': -1 }, 'default-ttl'],
    [{ 'default-ttl': '5 days' }, 'default-ttl'],
    [{ 'auto-delete-delay': 'soon' }, 'auto-delete-delay'],
  ];
  for (const [args, key] of bad) {
    it(`refuses ${JSON.stringify(args)} naming '${key}'`, () => {
      const err = caught(() => parseQueueSettings(args));
      expect(err.code).toBe('TANDEM_ERR_INVALID_ARGUMENT');
      expect(err.message).toContain(key);
    });
  }
});

describe('other parsers', () => {
  it('parseBoolean / parseCount / parseDuration', () => {
    expect(parseBoolean('k', 'no')).toBe(false);
    expect(parseBoolean('k', 1)).toBe(true);
    expect(caught(() => parseBoolean('flag', 2)).message).toContain('flag');
    expect(parseCount('k', 0)).toBe(0);
    expect(caught(() => parseCount('k', ' 7 ')).message).toContain('digits only');
    expect(parseCount('k', 9n)).toBe(9);
    expect(caught(() => parseCount('count', '')).message).toContain('count');
    expect(caught(() => parseCount('count', Number.NaN)).message).toContain('count');
    expect(parseDuration('k', '500ms', 1000)).toBe(500);
    expect(parseDuration('k', '1m', 1)).toBe(60_000);
    expect(parseDuration('k', '1.5h', 1)).toBe(5_400_000);
    expect(parseDuration('k', 2, 1000)).toBe(2000);
    expect(parseDuration('k', '2', 1000)).toBe(2000);
    expect(caught(() => parseDuration('ttl', Number.POSITIVE_INFINITY, 1)).message).toContain('ttl');
  });

  it('parseExchangeType / parseExchangeSettings', () => {
    expect(parseExchangeType('fanout')).toBe('fanout');
    expect(caught(() => parseExchangeType('headers')).code).toBe('TANDEM_ERR_INVALID_ARGUMENT');
    expect(parseExchangeSettings({ durable: 'true', alternate_exchange: 'x', 'qpid.replicate': 'none' })).toEqual({
      durable: true,
      alternateExchange: 'x',
      replicate: 'none',
    });
    expect(caught(() => parseExchangeSettings({ colour: 'red' })).message).toContain('colour');
    expect(caught(() => parseExchangeSettings({ replicate: 'most' })).message).toContain('replicate');
  });
});

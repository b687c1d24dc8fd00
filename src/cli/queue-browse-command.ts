// tandem queue browse: what a queue holds, without taking it (qpid's drain
// --browse, RabbitMQ's "get messages" with requeue, Artemis's console browse).
import type { Command } from 'commander';
import { type BrowsedMessage, browsedJson, browsedText, describeBrowsed } from '../admin/browsed-message.js';
import { MAX_BROWSE_COUNT, browseQueue } from '../admin/queue-browser.js';
import { TandemError, invalidArgument } from '../broker/errors.js';
import { timeoutMsOf } from './broker-address.js';
import { action, addBrokerOption, withBroker, type BrokerOption } from './common.js';

/** Most bytes of each body shown (--body-bytes): a browse is for reading, not for exporting messages. */
export const MAX_BODY_BYTES = 1024 * 1024;

interface BrowseCliOptions extends BrokerOption {
  count: string;
  bodyBytes: string;
}

/** A whole number option within bounds (digits only: Number() also took '0x10' and '1e3'). */
function wholeNumberOf(value: string, option: string, min: number, max: number): number {
  const n = /^\d{1,10}$/.test(value) ? Number(value) : Number.NaN;
  if (!(n >= min && n <= max)) throw invalidArgument(`${option} must be a whole number from ${min} to ${max}, not '${value}'`);
  return n;
}

export function queueBrowseCommand(queue: Command): void {
  addBrokerOption(
    queue
      .command('browse <name>')
      .summary('show the messages of a queue without taking them')
      .description(
        'show the messages at the head of a queue without taking them: nothing is acquired or consumed and no delivery-count changes. ' +
          "Shows each message's header, properties, message-annotations (a dead letter's x-opt-tandem-dead-letter-reason and -queue), " +
          'application-properties and body (text as it is, binary as text when it is UTF-8, else as hex, in --json too; other values as JSON). ' +
          'Control characters are shown escaped (\\xHH, \\uHHHH). Held messages (delivery delay, not yet due: counted in the depth) and messages out with a consumer are not shown. ' +
          'An auto-delete queue without a consumer is not browsed (the browser would be its first consumer, and its leaving would delete the queue). ' +
          "Needs 'read' on the queue (docs/security.md). On an HA backup it shows the backup's copy.",
      )
      .option('--count <n>', `show at most n messages, 1-${MAX_BROWSE_COUNT}`, '10')
      .option('--body-bytes <n>', `show at most n bytes of each body, 0-${MAX_BODY_BYTES}`, '200'),
  ).action(
    action(async (name: string, o: BrowseCliOptions) => {
      const count = wholeNumberOf(o.count, '--count', 1, MAX_BROWSE_COUNT);
      const bodyBytes = wholeNumberOf(o.bodyBytes, '--body-bytes', 0, MAX_BODY_BYTES);
      const timeoutMs = timeoutMsOf(o.timeout, 10);
      const out = output(o.json === true);
      await withBroker(o, async (client) => {
        // The queue must be there: an attach to an unknown name would make one on a broker
        // with auto-create on, and one to an exchange subscribes to it. Only admins may ask
        // the management node; another user's attach alone is held to the ACL's read.
        const attrs = (await client.request('READ', 'queue', name).catch((err: unknown) => {
          if (!(err instanceof TandemError && err.code === 'TANDEM_ERR_UNAUTHORIZED')) throw err;
          return undefined;
        })) as Record<string, unknown> | undefined;
        refuseUnusedAutoDelete(name, attrs);
        let failed = true;
        try {
          await browseQueue(client.connection, name, { count, timeoutMs, onMessage: (payload, position) => out.message(describeBrowsed(payload, position, bodyBytes)) });
          failed = false;
        } finally {
          out.end(failed);
        }
      });
    }),
  );
}

/**
 * A browser counts as a consumer of an auto-delete queue (as in qpidd): one that has none
 * would be deleted, messages and all, when the browse detaches. Not done for the operator.
 */
function refuseUnusedAutoDelete(name: string, attrs: Record<string, unknown> | undefined): void {
  if (attrs?.['auto-delete'] !== true || Number(attrs.consumers) !== 0) return;
  throw new TandemError(
    'TANDEM_ERR_PRECONDITION',
    `queue '${name}' is auto-delete and has no consumer: a browser would be its first and, when the browse ends, the broker would delete the queue with its messages; browse it while a consumer is attached`,
  );
}

/** Each message is written as it comes (memory holds one at a time); --json: one array, closed even when the browse failed part way. */
function output(json: boolean): { message(m: BrowsedMessage): void; end(failed: boolean): void } {
  let shown = 0;
  return {
    message(m) {
      if (json) process.stdout.write(`${shown === 0 ? '[\n' : ',\n'}${browsedJson(m)}`);
      else process.stdout.write(`${shown === 0 ? '' : '\n'}${browsedText(m)}\n`);
      shown++;
    },
    end(failed) {
      if (shown > 0) {
        if (json) process.stdout.write('\n]\n');
      } else if (!failed) process.stdout.write(json ? '[]\n' : 'no messages\n');
    },
  };
}

// tandem exchange add|del|list, tandem bind|unbind.
import type { Command } from 'commander';
import { rowsOf } from '../admin/client.js';
import { action, addBrokerOption, print, table, withBroker, type BrokerOption } from './common.js';

export function exchangeCommands(program: Command): void {
  const exchange = program.command('exchange').description('manage exchanges');

  addBrokerOption(
    exchange
      .command('add <type> <name>')
      .description('create an exchange of type direct, topic or fanout')
      .option('--durable', 'survives a broker restart')
      .option('--alternate-exchange <name>', 'where unroutable messages go')
      .option('--replicate <level>', 'HA replication: none, configuration or all'),
  ).action(
    action(async (type: string, name: string, o: BrokerOption & { durable?: boolean; alternateExchange?: string; replicate?: string }) => {
      const body: Record<string, unknown> = { 'exchange-type': type };
      if (o.durable) body.durable = true;
      if (o.alternateExchange) body['alternate-exchange'] = o.alternateExchange;
      if (o.replicate) body['qpid.replicate'] = o.replicate;
      const r = await withBroker(o, (c) => c.request('CREATE', 'exchange', name, body));
      print(o, r, () => `exchange '${name}' (${type}) created`);
    }),
  );

  addBrokerOption(exchange.command('del <name>').description('delete an exchange')).action(
    action(async (name: string, o: BrokerOption) => {
      const r = await withBroker(o, (c) => c.request('DELETE', 'exchange', name));
      print(o, r, () => `exchange '${name}' deleted`);
    }),
  );

  addBrokerOption(exchange.command('list').description('list exchanges')).action(
    action(async (o: BrokerOption) => {
      const rows = rowsOf(await withBroker(o, (c) => c.request('QUERY', 'exchange', undefined)));
      rows.sort((a, b) => String(a.name).localeCompare(String(b.name)));
      print(o, rows, () => table(rows, ['name', 'type', 'durable', 'bindings', 'qpid.replicate', 'made-by-dr']));
    }),
  );

  addBrokerOption(program.command('bind <exchange> <queue> [key]').description('bind a queue to an exchange with a key')).action(
    action(async (ex: string, queue: string, key: string | undefined, o: BrokerOption) => {
      const r = await withBroker(o, (c) => c.request('CREATE', 'binding', undefined, { exchange: ex, queue, key: key ?? '' }));
      print(o, r, () => `bound '${queue}' to '${ex}' with key '${key ?? ''}'`);
    }),
  );

  addBrokerOption(program.command('unbind <exchange> <queue> [key]').description('remove a binding')).action(
    action(async (ex: string, queue: string, key: string | undefined, o: BrokerOption) => {
      const r = await withBroker(o, (c) => c.request('DELETE', 'binding', undefined, { exchange: ex, queue, key: key ?? '' }));
      print(o, r, () => `unbound '${queue}' from '${ex}' (key '${key ?? ''}')`);
    }),
  );

  addBrokerOption(program.command('bindings').description('list bindings')).action(
    action(async (o: BrokerOption) => {
      const rows = rowsOf(await withBroker(o, (c) => c.request('QUERY', 'binding', undefined)));
      print(o, rows, () => table(rows, ['exchange', 'queue', 'key']));
    }),
  );
}

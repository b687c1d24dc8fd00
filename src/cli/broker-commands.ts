// tandem broker status, tandem connection list|close.
import type { Command } from 'commander';
import { rowsOf } from '../admin/client.js';
import { action, addBrokerOption, attributes, print, table, withBroker, type BrokerOption } from './common.js';

export function brokerCommands(program: Command): void {
  const broker = program.command('broker').description('the broker itself');
  addBrokerOption(broker.command('status').description('version, state, log position, counts')).action(
    action(async (o: BrokerOption) => {
      const s = (await withBroker(o, (c) => c.request('READ', 'broker', 'broker'))) as Record<string, unknown>;
      print(o, s, () => attributes(s));
    }),
  );

  const connection = program.command('connection').description('client connections');
  addBrokerOption(connection.command('list').description('list client connections')).action(
    action(async (o: BrokerOption) => {
      const rows = rowsOf(await withBroker(o, (c) => c.request('QUERY', 'connection', undefined)));
      print(o, rows, () => table(rows, ['id', 'remote', 'user', 'admin', 'links', 'container']));
    }),
  );
  addBrokerOption(connection.command('close <id>').description('close a client connection')).action(
    action(async (id: string, o: BrokerOption) => {
      const r = await withBroker(o, (c) => c.request('DELETE', 'connection', id));
      print(o, r, () => `connection ${id} closed`);
    }),
  );
}

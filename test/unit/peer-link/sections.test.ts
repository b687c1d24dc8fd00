// The stream message header and the hello/open properties, written by the
// engine's encoder, byte for byte as rhea's type writer wrote them (the hex was
// captured from rhea 3.0.5 for the same values): a backup or bridge of another
// version, and a broker still served by rhea, read exactly what they always did.
import { describe, expect, it } from 'vitest';
import { Encoder } from '../../../src/amqp/engine/encoder.js';
import { decodeMessage } from '../../../src/amqp/engine/message.js';
import { DATA_SECTION_HEADER, applicationPropertiesSection, writeDataSectionHeader } from '../../../src/peer-link/sections.js';
import { peerMap } from '../../../src/peer-link/peer-values.js';

const hex = (s: string) => Buffer.from(s).toString('hex');

describe('peer-link sections - application properties as rhea wrote them', () => {
  it('a heartbeat header: str8 keys and values, a uint', () => {
    expect(applicationPropertiesSection({ k: 'heartbeat', lsn: 123456 }).toString('hex')).toBe('005374d10000001c00000004a1016ba109686561727462656174a1036c736e700001e240');
  });

  it('zero is a smallint, small whole numbers smalluint', () => {
    expect(applicationPropertiesSection({ k: 'changes', lsn: 0, epoch: 1 }).toString('hex')).toBe('005374d10000002000000006a1016ba1076368616e676573a1036c736e5400a10565706f63685201');
  });

  it('every width rhea chose for a number, booleans, null and NaN', () => {
    const props = { small: 255, mid: 256, top: 4294967295, over: 4294967296, neg: -5, negmid: -129, negtop: -2147483646, neglong: -2147483647, frac: 1.5, t: true, f: false, n: null, nan: NaN };
    expect(applicationPropertiesSection(props).toString('hex')).toBe(
      '005374d1000000840000001aa105736d616c6c52ffa1036d69647000000100a103746f7070ffffffffa1046f766572800000000100000000a1036e656754fba1066e65676d696471ffffff7fa1066e6567746f707180000002a1076e65676c6f6e6781ffffffff80000001a10466726163823ff8000000000000a1017441a1016642a1016e40a1036e616e40',
    );
  });

  it('strings over 255 bytes are str32, counted in bytes', () => {
    const props = { reason: 'r'.repeat(300), ['k'.repeat(256)]: 'é' };
    expect(applicationPropertiesSection(props).toString('hex')).toBe(
      '005374d10000024600000004' + 'a106' + hex('reason') + 'b10000012c' + '72'.repeat(300) + 'b100000100' + '6b'.repeat(256) + 'a102c3a9',
    );
  });

  it('an empty map is still a map32', () => {
    expect(applicationPropertiesSection({}).toString('hex')).toBe('005374d10000000400000000');
  });

  it('a stream message made of the two sections decodes to its properties and its body', () => {
    const head = applicationPropertiesSection({ k: 'changes', lsn: 7 });
    const body = Buffer.from('records');
    const out = Buffer.alloc(head.length + DATA_SECTION_HEADER + body.length);
    head.copy(out, 0);
    body.copy(out, writeDataSectionHeader(out, head.length, body.length));
    const m = decodeMessage(out);
    expect(m.applicationProperties).toEqual({ k: 'changes', lsn: 7 });
    expect(m.body).toEqual(body);
  });
});

describe('peer-link values - open and attach properties as rhea wrote them', () => {
  const encode = (props: Record<string, unknown>) => new Encoder().write(peerMap(props, 'symbol')).bytes().toString('hex');

  it('an HA hello: sym8 keys, str8, smallint zero, uint, smalluint', () => {
    const hello = { 'tandem.broker-id': 'b1', 'tandem.lsn': 0, 'tandem.journal-lsn': 70000, 'tandem.epoch': 2, 'tandem.replicate': 'all' };
    expect(encode(hello)).toBe(
      'd1000000680000000aa31074616e64656d2e62726f6b65722d6964a1026231a30a74616e64656d2e6c736e5400a31274616e64656d2e6a6f75726e616c2d6c736e7000011170a30c74616e64656d2e65706f63685202a31074616e64656d2e7265706c6963617465a103616c6c',
    );
  });

  it('open properties: true, and a key over 255 bytes as sym32', () => {
    const props = { 'qpid.ha-admin': true, 'tandem.instance': 'i-1', ['s'.repeat(256)]: 'x' };
    expect(encode(props)).toBe('d10000013200000006a30d717069642e68612d61646d696e41a30f74616e64656d2e696e7374616e6365a103692d31b300000100' + '73'.repeat(256) + 'a10178');
  });
});

// Whether an object is let go: the tests that hold only a WeakRef to what the code under
// test should free (a connection after its socket closed, a message body after its
// journal sync) ask the garbage collector directly, through V8's gc exposed in-process.
import v8 from 'node:v8';
import { runInNewContext } from 'node:vm';

v8.setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

/** Whether the object is collected within a few rounds of the event loop and full collections. */
export async function collected(ref: WeakRef<object>): Promise<boolean> {
  for (let i = 0; i < 20; i++) {
    await new Promise((r) => setImmediate(r));
    gc();
    if (ref.deref() === undefined) return true;
  }
  return false;
}

// Bytes a directory's files take (not recursive): the journal's size for metrics.
import { readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';

export async function filesBytes(dir: string): Promise<number> {
  let total = 0;
  const names = await readdir(dir).catch(() => [] as string[]);
  for (const name of names) {
    // A segment compacted away between readdir and stat is simply gone.
    const st = await stat(join(dir, name)).catch(() => undefined);
    if (st?.isFile()) total += st.size;
  }
  return total;
}

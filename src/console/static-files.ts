// The console's pages: the files `npm run build` puts in dist/console-ui (see ui/),
// read once at start and served from memory. Only those files exist; nothing is
// looked up on disk per request, so no path a client sends can reach another file.
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { extname, join, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

export const UI_DIR = fileURLToPath(new URL('../console-ui/', import.meta.url));

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
};

export interface StaticFile {
  body: Buffer;
  type: string;
}

/** URL path ("/app.js") to file, for every file of the UI directory with a known type. */
export function loadStaticFiles(dir = UI_DIR): Map<string, StaticFile> {
  const files = new Map<string, StaticFile>();
  if (!existsSync(dir)) return files;
  const walk = (d: string) => {
    for (const name of readdirSync(d)) {
      const path = join(d, name);
      if (statSync(path).isDirectory()) walk(path);
      else if (TYPES[extname(name)]) files.set(`/${relative(dir, path).split(sep).join('/')}`, { body: readFileSync(path), type: TYPES[extname(name)]! });
    }
  };
  walk(dir);
  const index = files.get('/index.html');
  if (index) files.set('/', index);
  return files;
}

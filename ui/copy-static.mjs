// The pages' HTML and CSS next to the compiled scripts in dist/console-ui: the
// broker serves that directory, and the packages ship all of dist/.
import { cpSync, mkdirSync } from 'node:fs';

const from = new URL('./static/', import.meta.url);
const to = new URL('../dist/console-ui/', import.meta.url);
mkdirSync(to, { recursive: true });
cpSync(from, to, { recursive: true });

// Experiment only (node -r bench/experiments/nodelay-preload.cjs dist/cli/tandemd.js ...): sets
// TCP_NODELAY on every accepted socket, to measure what the broker gains from it
// without editing src/.
const net = require('node:net');
const emit = net.Server.prototype.emit;
net.Server.prototype.emit = function (event, socket, ...rest) {
  if (event === 'connection' && socket && typeof socket.setNoDelay === 'function') socket.setNoDelay(true);
  return emit.call(this, event, socket, ...rest);
};

// Experiment only (node -r bench/experiments/cork-preload.cjs dist/cli/tandemd.js ...):
// rhea's Transport.write calls socket.write once per frame, one syscall each. This
// corks the socket around it so every frame of one output pass leaves in a single
// writev. Patches the rhea that tandemd itself loads (resolved from its entry).
const { dirname } = require('node:path');
const transportPath = require.resolve('rhea/lib/transport.js', { paths: [dirname(process.argv[1])] });
const Transport = require(transportPath);
const write = Transport.prototype.write;
Transport.prototype.write = function (socket) {
  if (typeof socket.cork !== 'function') return write.call(this, socket);
  socket.cork();
  try {
    return write.call(this, socket);
  } finally {
    socket.uncork();
  }
};

// CommonJS entry: Node 24 loads the ES module synchronously, so CommonJS and
// ESM users share one instance of the package (and one LockError class).
module.exports = require('./index.js');

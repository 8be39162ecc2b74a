// Config of the per-layer scripts (`npm run test:unit` …): .mocharc.json without its spec of every
// layer, since mocha adds the specs given on the command line to the config's rather than replacing them.
const { spec: _every, ...settings } = require('../../.mocharc.json');
module.exports = settings;

#!/usr/bin/env node
// `npx dokebi-lock`: status, inspect and force-release against the app's
// own backends (lib/cli.js; `dokebi-lock --help`).
import { run } from '../lib/cli.js';

process.exitCode = await run(process.argv.slice(2));

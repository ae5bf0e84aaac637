// Command-line helpers of the bench/peer scripts, free of node-llama-cpp (serve_table.mjs runs
// where only the native peer is built).

// Minimal `--name value` / `--flag` parser. `spec` maps option names to "string" | "boolean".
export function parseArgs(argv, spec, usage) {
    const out = {};
    for (let i = 0; i < argv.length; i++) {
        const arg = argv[i];
        if (arg === "-h" || arg === "--help") {
            process.stdout.write(usage);
            process.exit(0);
        }
        const m = /^--([a-z0-9-]+)(?:=(.*))?$/.exec(arg);
        if (m == null || !(m[1] in spec))
            fail(`unknown argument: ${arg}\n${usage}`);
        const name = m[1];
        if (spec[name] === "boolean") {
            if (m[2] != null)
                fail(`--${name} takes no value`);
            out[name] = true;
        } else {
            const value = m[2] ?? argv[++i];
            if (value == null)
                fail(`--${name} needs a value`);
            out[name] = value;
        }
    }
    return out;
}

export function fail(message) {
    process.stderr.write(`error: ${message}\n`);
    process.exit(2);
}

export function parsePositiveInt(name, value) {
    const n = Number(value);
    if (!Number.isInteger(n) || n <= 0)
        fail(`--${name} must be a positive integer, got "${value}"`);
    return n;
}

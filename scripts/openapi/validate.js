#!/usr/bin/env node
// Validates an OpenAPI document (docs/openapi.json) with @apidevtools/swagger-parser:
// the official OpenAPI 3.0 JSON schema, every $ref resolvable, plus the project's own
// rules, which the C test that compares the document with the server's routes relies on:
// every operation has an operationId and no two share one, and the {names} of each path
// template are exactly that operation's path parameters (swagger-parser checks this for
// Swagger 2.0 only).
//
// Usage: node scripts/openapi/validate.js docs/openapi.json
// Prints one line and exits 0 when the document is valid; prints the errors and exits 1.
'use strict';

const fs = require('fs');
const path = require('path');

const PROG = 'openapi';
const METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'];

function fail(lines) {
    for (const l of [].concat(lines))
        process.stderr.write(`${PROG}: ${l}\n`);
    process.exit(1);
}

let SwaggerParser;
try {
    SwaggerParser = require('@apidevtools/swagger-parser');
} catch (e) {
    fail([
        `cannot load @apidevtools/swagger-parser (${e.code || e.message})`,
        `run scripts/deps.sh (or: cd ${path.relative(process.cwd(), __dirname) || '.'} && npm ci)`,
    ]);
}

// The project's rules, on the document as written (before any $ref is resolved).
function operationIdProblems(doc) {
    const problems = [];
    const seen = new Map();
    let operations = 0;
    for (const [p, item] of Object.entries(doc.paths || {})) {
        for (const m of METHODS) {
            const op = item && item[m];
            if (!op)
                continue;
            operations++;
            const where = `${m.toUpperCase()} ${p}`;
            const id = op.operationId;
            if (typeof id !== 'string' || id === '') {
                problems.push(`${where}: no operationId`);
                continue;
            }
            if (seen.has(id))
                problems.push(`${where}: operationId "${id}" is also used by ${seen.get(id)}`);
            else
                seen.set(id, where);
        }
    }
    return { problems, operations };
}

// Resolves a local $ref ("#/components/parameters/X") in doc; anything else is returned as is.
function local(doc, obj) {
    if (!obj || typeof obj.$ref !== 'string' || !obj.$ref.startsWith('#/'))
        return obj;
    let v = doc;
    for (const t of obj.$ref.slice(2).split('/'))
        v = v == null ? undefined : v[t.replace(/~1/g, '/').replace(/~0/g, '~')];
    return v;
}

// Every {name} in a path template is declared as a path parameter of each of its
// operations (at path or operation level), and no path parameter is declared that the
// template does not have.
function pathParameterProblems(doc) {
    const problems = [];
    for (const [p, item] of Object.entries(doc.paths || {})) {
        const inTemplate = [...p.matchAll(/\{([^}]+)\}/g)].map((m) => m[1]).sort();
        for (const m of METHODS) {
            const op = item && item[m];
            if (!op)
                continue;
            const declared = new Set();
            for (const prm of [...(item.parameters || []), ...(op.parameters || [])]) {
                const r = local(doc, prm);
                if (r && r.in === 'path')
                    declared.add(r.name);
            }
            const where = `${m.toUpperCase()} ${p}`;
            for (const n of inTemplate)
                if (!declared.has(n))
                    problems.push(`${where}: path parameter {${n}} is not declared`);
            for (const n of declared)
                if (!inTemplate.includes(n))
                    problems.push(`${where}: path parameter "${n}" is not in the path`);
        }
    }
    return problems;
}

async function main() {
    const file = process.argv[2];
    if (!file || process.argv.length > 3)
        fail('usage: node scripts/openapi/validate.js <openapi.json>');

    let doc;
    try {
        doc = JSON.parse(fs.readFileSync(file, 'utf8'));
    } catch (e) {
        fail(`${file}: ${e.message}`);
    }
    if (doc === null || typeof doc !== 'object' || Array.isArray(doc))
        fail(`${file}: not a JSON object`);

    const errors = [];
    try {
        // validate() takes a copy: it dereferences what it is given.
        await SwaggerParser.validate(structuredClone(doc));
    } catch (e) {
        const details = Array.isArray(e.details) && e.details.length ? e.details : null;
        if (details)
            for (const d of details)
                errors.push(`${(d.instancePath || d.path || '') || '/'}: ${d.message}`);
        else
            errors.push(e.message);
    }

    const { problems, operations } = operationIdProblems(doc);
    errors.push(...problems, ...pathParameterProblems(doc));

    if (errors.length)
        fail([`${file} is not a valid OpenAPI document:`, ...errors.map((e) => `  ${e}`)]);

    const version = doc.openapi || doc.swagger;
    const npaths = Object.keys(doc.paths || {}).length;
    process.stdout.write(
        `${PROG}: ${file} is a valid OpenAPI ${version} document ` +
        `(${npaths} paths, ${operations} operations)\n`);
}

main().catch((e) => fail(e && e.stack ? e.stack : String(e)));

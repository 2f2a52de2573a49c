#!/usr/bin/env node
// Renders docs/openapi.json as one self-contained HTML page (docs/api.html):
// no script, no font, no request to anywhere, so it opens from a file and
// reads the same offline.  Node.js only, no package: it runs before `npm ci`.
//
//   node scripts/openapi/render.js [IN.json [OUT.html]]
//
// Defaults: docs/openapi.json, written to stdout.  The output depends on the
// document alone (no date, no version of this script), so regenerating and
// comparing tells whether docs/api.html is up to date
// (service/tests/test_api_html.sh does, and opens the page in Chromium).
// Every operation is a <section id="op-OPERATIONID">, every schema a
// <section id="schema-NAME">.
'use strict';

const fs = require('fs');
const path = require('path');

const root = path.resolve(__dirname, '..', '..');
const inPath = process.argv[2] || path.join(root, 'docs', 'openapi.json');
const outPath = process.argv[3];
const doc = JSON.parse(fs.readFileSync(inPath, 'utf8'));

const METHODS = ['get', 'head', 'post', 'put', 'patch', 'delete', 'options', 'trace'];

function esc(s) {
    return String(s)
        .replace(/&/g, '&amp;')
        .replace(/</g, '&lt;')
        .replace(/>/g, '&gt;')
        .replace(/"/g, '&quot;');
}

// The document's descriptions use a little Markdown: `code`, **bold**,
// [text](url), paragraphs and "- " lists.  Text is escaped first.
function inline(s) {
    const parts = String(s).split('`');
    return parts
        .map((p, i) => {
            if (i % 2 === 1 && i < parts.length - 1) return `<code>${esc(p)}</code>`;
            let t = esc(i % 2 === 1 ? '`' + p : p);
            t = t.replace(/\*\*([^*]+)\*\*/g, '<strong>$1</strong>');
            t = t.replace(/\[([^\]]+)\]\(([^)\s]+)\)/g, '<a href="$2">$1</a>');
            return t;
        })
        .join('');
}

function md(s) {
    if (!s) return '';
    return String(s)
        .split(/\n\s*\n/)
        .map((block) => {
            const lines = block.split('\n');
            if (lines.every((l) => /^- /.test(l)))
                return '<ul>' + lines.map((l) => `<li>${inline(l.slice(2))}</li>`).join('') + '</ul>';
            return `<p>${inline(lines.join(' '))}</p>`;
        })
        .join('\n');
}

function refName(ref) {
    return ref.replace(/^#\/components\/[^/]+\//, '');
}

function resolve(o) {
    let seen = 0;
    while (o && o.$ref) {
        const parts = o.$ref.replace(/^#\//, '').split('/');
        o = parts.reduce((a, k) => (a ? a[k] : undefined), doc);
        if (++seen > 20) throw new Error('a $ref loop');
    }
    return o;
}

// A schema's type in words, with links to the named schemas.
function typeOf(s) {
    if (!s) return '';
    if (s.$ref) {
        const n = refName(s.$ref);
        return `<a href="#schema-${esc(n)}">${esc(n)}</a>`;
    }
    if (s.oneOf) return 'one of ' + s.oneOf.map(typeOf).join(' | ');
    if (s.anyOf) return 'any of ' + s.anyOf.map(typeOf).join(' | ');
    if (s.allOf) return 'all of ' + s.allOf.map(typeOf).join(' &amp; ');
    if (s.not) return 'not ' + typeOf(s.not);
    let t = esc(s.type || 'any');
    if (s.type === 'array') t = 'array of ' + typeOf(s.items);
    if (s.format) t += ` (${esc(s.format)})`;
    if (s.nullable) t += ', nullable';
    return t;
}

// The constraints of a schema, one short phrase each.
function constraints(s) {
    if (!s || s.$ref) return '';
    const c = [];
    if (s.enum) c.push('one of ' + s.enum.map((v) => `<code>${esc(JSON.stringify(v))}</code>`).join(', '));
    for (const k of ['minimum', 'maximum', 'minLength', 'maxLength', 'minItems', 'maxItems', 'pattern'])
        if (s[k] !== undefined) c.push(`${k} <code>${esc(s[k])}</code>`);
    if (s.default !== undefined) c.push(`default <code>${esc(JSON.stringify(s.default))}</code>`);
    if (s.additionalProperties === false) c.push('no other fields');
    return c.join('; ');
}

function propertiesTable(s) {
    if (!s || !s.properties) return '';
    const req = new Set(s.required || []);
    let h = '<table class="fields"><thead><tr><th>field</th><th>type</th><th>required</th>' +
        '<th>meaning</th></tr></thead><tbody>';
    for (const [name, p] of Object.entries(s.properties)) {
        const c = constraints(p);
        h += `<tr><td><code>${esc(name)}</code></td><td>${typeOf(p)}</td>` +
            `<td>${req.has(name) ? 'yes' : ''}</td><td>${md(p.description)}` +
            (c ? `<p class="constraints">${c}</p>` : '') + '</td></tr>';
    }
    return h + '</tbody></table>';
}

function schemaBlock(s) {
    if (!s) return '';
    if (s.$ref || s.oneOf || s.anyOf) return `<p>${typeOf(s)}</p>`;
    let h = '';
    if (s.allOf) h += `<p>${typeOf(s)}</p>`;
    if (s.description) h += md(s.description);
    if (!s.properties) {
        const c = constraints(s);
        h += `<p>${typeOf(s)}${c ? '; ' + c : ''}</p>`;
    }
    return h + propertiesTable(s);
}

function contentBlock(content) {
    if (!content) return '';
    return Object.entries(content)
        .map(([type, m]) => `<div class="content"><p class="ctype"><code>${esc(type)}</code></p>` +
            schemaBlock(m.schema) + '</div>')
        .join('');
}

function headersList(headers) {
    if (!headers) return '';
    const items = Object.entries(headers).map(([name, h0]) => {
        const h = resolve(h0);
        return `<li><code>${esc(name)}</code>${h.required ? ' (always)' : ''}: ${typeOf(h.schema)}` +
            (constraints(h.schema) ? `, ${constraints(h.schema)}` : '') +
            (h.description ? ` ${inline(h.description)}` : '') + '</li>';
    });
    return `<ul class="headers">${items.join('')}</ul>`;
}

function securityText(sec) {
    if (!sec || sec.length === 0) return 'none';
    return sec
        .map((alt) => Object.keys(alt).map((n) => `<a href="#security-${esc(n)}">${esc(n)}</a>`).join(' and '))
        .join(' or ');
}

function codes(obj) {
    return Object.entries(obj || {})
        .map(([st, list]) => `<li><code>${esc(st)}</code>: ${list.map((e) => `<code>${esc(e)}</code>`).join(', ')}</li>`)
        .join('');
}

// ---- collect the operations, in the document's order, by tag
const ops = [];
for (const [p, item] of Object.entries(doc.paths || {}))
    for (const m of METHODS)
        if (item[m]) ops.push({ path: p, method: m, op: item[m], item });
const tags = (doc.tags || []).map((t) => t.name);
for (const o of ops)
    for (const t of o.op.tags || ['other']) if (!tags.includes(t)) tags.push(t);
const tagDesc = Object.fromEntries((doc.tags || []).map((t) => [t.name, t.description]));
const opsOf = (tag) => ops.filter((o) => (o.op.tags || ['other']).includes(tag));

const title = doc.info && doc.info.title ? doc.info.title : 'API';
let out = '';
const w = (s) => { out += s + '\n'; };

w('<!DOCTYPE html>');
w('<html lang="en">');
w('<head>');
w('<meta charset="utf-8">');
w('<meta name="viewport" content="width=device-width, initial-scale=1">');
w(`<title>${esc(title)}</title>`);
w(`<style>
body { font: 15px/1.5 system-ui, sans-serif; margin: 0 auto; max-width: 70em; padding: 0 1.5em 4em; color: #1b1b1b; }
h1 { margin-top: 1em; } h2 { border-bottom: 2px solid #ddd; margin-top: 2.5em; } h3 { margin-top: 2em; }
code { font: 13px/1.4 ui-monospace, monospace; background: #f3f3f3; padding: 0 .2em; }
table { border-collapse: collapse; width: 100%; margin: .5em 0 1em; }
th, td { border: 1px solid #ddd; padding: .3em .5em; text-align: left; vertical-align: top; }
td p { margin: 0 0 .4em; } th { background: #f7f7f7; }
.method { display: inline-block; min-width: 4.5em; font-weight: bold; text-transform: uppercase; }
.operation { border-top: 1px solid #ddd; } .constraints { color: #555; font-size: 13px; }
.ctype { margin: .3em 0; } nav ul { columns: 2; } .headers { margin: .2em 0; }
</style>`);
w('</head>');
w('<body>');
w(`<header><h1>${esc(title)}</h1>`);
w(`<p>Version ${esc(doc.info.version)}, OpenAPI ${esc(doc.openapi)}. Rendered from ` +
    '<code>docs/openapi.json</code> by <code>scripts/openapi/render.js</code>; what each answer ' +
    'promises across faults is in <a href="api.md">api.md</a>.</p></header>');

w('<nav id="contents"><h2>Operations</h2>');
for (const t of tags) {
    w(`<h3>${esc(t)}</h3><ul>`);
    for (const o of opsOf(t))
        w(`<li><span class="method">${esc(o.method)}</span> <a href="#op-${esc(o.op.operationId)}">` +
            `<code>${esc(o.path)}</code></a> ${esc(o.op.summary || '')}</li>`);
    w('</ul>');
}
w('</nav>');

w('<section id="overview"><h2>Overview</h2>');
w(md(doc.info.description));
w('<h3>Servers</h3><ul>');
for (const s of doc.servers || []) w(`<li><code>${esc(s.url)}</code>: ${inline(s.description || '')}</li>`);
w('</ul>');
w('<h3>Security schemes</h3>');
for (const [n, s] of Object.entries((doc.components || {}).securitySchemes || {}))
    w(`<div id="security-${esc(n)}"><h4>${esc(n)}</h4><p>${esc(s.type)} ${esc(s.scheme || '')}` +
        `${s.bearerFormat ? ' (' + esc(s.bearerFormat) + ')' : ''}</p>${md(s.description)}</div>`);
if (doc['x-protocol-answers'])
    w('<h3>Answers before any route</h3><p>Given by the server to a request it cannot frame ' +
        '(<code>x-protocol-answers</code>): status and error codes.</p>' +
        `<ul>${codes(doc['x-protocol-answers'])}</ul>`);
if (doc['x-unrouted-answers'])
    w('<h3>Answers to a path that is no route</h3><p>(<code>x-unrouted-answers</code>): status ' +
        `and error codes.</p><ul>${codes(doc['x-unrouted-answers'])}</ul>`);
w('</section>');

for (const t of tags) {
    w(`<section id="tag-${esc(t)}"><h2>${esc(t)}</h2>`);
    if (tagDesc[t]) w(md(tagDesc[t]));
    for (const o of opsOf(t)) {
        const op = o.op;
        const id = op.operationId;
        w(`<section class="operation" id="op-${esc(id)}" data-operation-id="${esc(id)}">`);
        w(`<h3><span class="method">${esc(o.method)}</span> <code>${esc(o.path)}</code></h3>`);
        w(`<p><strong>${esc(op.summary || '')}</strong> (operationId <code>${esc(id)}</code>)</p>`);
        w(md(op.description));
        const servers = op.servers || o.item.servers;
        if (servers)
            w('<p>Served on: ' + servers.map((s) => `<code>${esc(s.url)}</code>`).join(', ') + '</p>');
        w(`<p>Authorization: ${securityText(op.security)}</p>`);
        const params = [...(o.item.parameters || []), ...(op.parameters || [])].map(resolve);
        if (params.length) {
            w('<h4>Parameters</h4><table class="fields"><thead><tr><th>name</th><th>in</th>' +
                '<th>type</th><th>required</th><th>meaning</th></tr></thead><tbody>');
            for (const p of params) {
                const c = constraints(p.schema);
                w(`<tr><td><code>${esc(p.name)}</code></td><td>${esc(p.in)}</td><td>${typeOf(p.schema)}</td>` +
                    `<td>${p.required ? 'yes' : ''}</td><td>${md(p.description)}` +
                    (c ? `<p class="constraints">${c}</p>` : '') + '</td></tr>');
            }
            w('</tbody></table>');
        }
        if (op.requestBody) {
            const rb = resolve(op.requestBody);
            w(`<h4>Request body${rb.required ? '' : ' (optional)'}</h4>`);
            w(md(rb.description));
            w(contentBlock(rb.content));
        }
        w('<h4>Responses</h4><table class="responses"><thead><tr><th>status</th><th>meaning</th>' +
            '</tr></thead><tbody>');
        for (const [st, r0] of Object.entries(op.responses || {})) {
            const r = resolve(r0);
            w(`<tr id="op-${esc(id)}-${esc(st)}"><td><code>${esc(st)}</code></td><td>${md(r.description)}` +
                headersList(r.headers) + contentBlock(r.content) + '</td></tr>');
        }
        w('</tbody></table>');
        w('</section>');
    }
    w('</section>');
}

w('<section id="schemas"><h2>Schemas</h2>');
for (const [n, s] of Object.entries((doc.components || {}).schemas || {})) {
    w(`<section class="schema" id="schema-${esc(n)}"><h3>${esc(n)}</h3>`);
    w(schemaBlock(s));
    if (s.oneOf || s.anyOf) w(md(s.description));
    w('</section>');
}
w('</section>');
w('</body>');
w('</html>');

if (outPath) fs.writeFileSync(outPath, out);
else process.stdout.write(out);

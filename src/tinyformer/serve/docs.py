"""/docs: the API's OpenAPI description as one plain HTML page, served from here (the stock page loads its
scripts from a CDN). The machine-readable description is at /api/openapi.json."""

from __future__ import annotations

import html
import json


def api_page(spec: dict) -> str:
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'><title>tinyformer playground API</title>",
        "<link rel='stylesheet' href='/static/style.css'></head><body class='docs'>",
        f"<h1>{html.escape(spec['info']['title'])} API</h1>",
        "<p>Machine-readable: <a href='/api/openapi.json'>/api/openapi.json</a> (OpenAPI "
        f'{html.escape(spec.get("openapi", ""))}). Every error is JSON: <code>{{"error": ..., "field": ...}}'
        "</code>.</p>",
    ]
    schemas = spec.get("components", {}).get("schemas", {})
    for path, methods in spec["paths"].items():
        for method, op in methods.items():
            parts.append(f"<h2><code>{method.upper()} {html.escape(path)}</code></h2>")
            parts.append(f"<p>{html.escape(op.get('summary', ''))}</p>")
            fields = [(p["name"], p.get("schema", {}), p.get("required", False)) for p in op.get("parameters", [])]
            body = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
            if "$ref" in body:
                model = schemas[body["$ref"].rsplit("/", 1)[-1]]
                need = set(model.get("required", []))
                fields += [(k, v, k in need) for k, v in model.get("properties", {}).items()]
            if fields:
                parts.append("<table><tr><th>field</th><th>type</th><th>required</th><th>about</th></tr>")
                parts += [_row(n, s, r) for n, s, r in fields]
                parts.append("</table>")
    return "\n".join(parts) + "\n</body></html>\n"


def _row(name: str, schema: dict, required: bool) -> str:
    kinds = [s.get("type", "") for s in schema.get("anyOf", [schema])]
    limits = {k: schema[k] for k in ("minimum", "maximum", "exclusiveMinimum", "maxLength") if k in schema}
    about = schema.get("description", "") + (f" {json.dumps(limits)}" if limits else "")
    cells = [f"<code>{html.escape(name)}</code>", " | ".join(k for k in kinds if k), "yes" if required else ""]
    return "<tr>" + "".join(f"<td>{html.escape(c) if i else c}</td>" for i, c in enumerate([*cells, about])) + "</tr>"

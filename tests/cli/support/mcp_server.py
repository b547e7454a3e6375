#!/usr/bin/env python3
"""A small MCP server for tests: newline-delimited JSON-RPC 2.0 over stdio
(MCP stdio transport), standard library only.

Usage: mcp_server.py [--die-at-start] [--hang-at-start] [--name NAME]

Tools:
  echo {text}        -> text content "echo: <text>"
  fail {}            -> a result with isError: true
  env {name}         -> the value of an environment variable ("<unset>" if none)
  cwd {}             -> the server's working directory
  pid {}             -> the server's process id
  picture {}         -> one text item and one image item
  crash {}           -> the server exits at once, without answering
  quit {}            -> answers "bye", then the server exits
  huge {mb}          -> a text result of that many megabytes, in one line
  deep {depth}       -> a result nested that many arrays deep
  garbage {}         -> a line that is not JSON, then a proper answer
"""
import json
import os
import sys
import time

SUPPORTED = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"]

TOOLS = [
    {
        "name": "echo",
        "description": "Echo the given text back.",
        "inputSchema": {
            "type": "object",
            "properties": {"text": {"type": "string", "description": "What to echo."}},
            "required": ["text"],
        },
    },
    {"name": "fail", "description": "Always fails.", "inputSchema": {"type": "object", "properties": {}}},
    {
        "name": "env",
        "description": "Read an environment variable of the server.",
        "inputSchema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
    },
    {"name": "cwd", "description": "The server's working directory.", "inputSchema": {"type": "object"}},
    {"name": "pid", "description": "The server's process id.", "inputSchema": {"type": "object"}},
    {"name": "picture", "description": "Text and an image.", "inputSchema": {"type": "object"}},
    {"name": "crash", "description": "Exit without answering.", "inputSchema": {"type": "object"}},
    {"name": "quit", "description": "Answer, then exit.", "inputSchema": {"type": "object"}},
    {"name": "huge", "description": "A result of `mb` megabytes.", "inputSchema": {"type": "object"}},
    {"name": "deep", "description": "A deeply nested result.", "inputSchema": {"type": "object"}},
    {"name": "garbage", "description": "Bytes that are not JSON first.", "inputSchema": {"type": "object"}},
]


def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def text(value, is_error=False):
    return {"content": [{"type": "text", "text": value}], "isError": is_error}


def call(name, args):
    if name == "echo":
        return text("echo: " + str(args.get("text", "")))
    if name == "fail":
        return text("this tool always fails", True)
    if name == "env":
        return text(os.environ.get(args.get("name", ""), "<unset>"))
    if name == "cwd":
        return text(os.getcwd())
    if name == "pid":
        return text(str(os.getpid()))
    if name == "picture":
        return {
            "content": [
                {"type": "text", "text": "a red dot"},
                {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
            ]
        }
    if name == "crash":
        sys.stderr.write("mcp test server: crashing on request\n")
        sys.stderr.flush()
        os._exit(3)
    return None


def main():
    args = sys.argv[1:]
    name = args[args.index("--name") + 1] if "--name" in args else "test-server"
    if "--die-at-start" in args:
        sys.stderr.write("mcp test server: cannot start (missing database)\n")
        sys.exit(1)
    if "--hang-at-start" in args:
        time.sleep(3600)
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        message = json.loads(line)
        if "id" not in message:
            continue  # notifications (notifications/initialized, cancelled) need no answer
        method, mid = message.get("method"), message["id"]
        params = message.get("params") or {}
        if method == "initialize":
            asked = params.get("protocolVersion")
            version = asked if asked in SUPPORTED else SUPPORTED[0]
            send({"jsonrpc": "2.0", "id": mid, "result": {
                "protocolVersion": version,
                "capabilities": {"tools": {}},
                "serverInfo": {"name": name, "version": "1.0.0"},
            }})
        elif method == "ping":
            send({"jsonrpc": "2.0", "id": mid, "result": {}})
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": mid, "result": {"tools": TOOLS}})
        elif method == "tools/call":
            result = call(params.get("name"), params.get("arguments") or {})
            if params.get("name") == "quit":
                send({"jsonrpc": "2.0", "id": mid, "result": text("bye")})
                time.sleep(0.05)
                os._exit(0)
            if params.get("name") == "huge":
                # Written in pieces: the line is never whole in this process.
                chunk = "x" * (1 << 20)
                sys.stdout.write('{"jsonrpc": "2.0", "id": %s, "result": {"content": [{"type": "text", "text": "' % json.dumps(mid))
                for _ in range(int((params.get("arguments") or {}).get("mb", 1))):
                    sys.stdout.write(chunk)
                sys.stdout.write('"}]}}\n')
                sys.stdout.flush()
                continue
            if params.get("name") == "deep":
                depth = int((params.get("arguments") or {}).get("depth", 100000))
                sys.stdout.write('{"jsonrpc": "2.0", "id": %s, "result": {"content": [], "structuredContent": {"a": %s%s}}}\n'
                                 % (json.dumps(mid), "[" * depth, "]" * depth))
                sys.stdout.flush()
                continue
            if params.get("name") == "garbage":
                sys.stdout.write("\x00\xff not json {{{\n")
                send({"jsonrpc": "2.0", "id": mid, "result": text("after the garbage")})
                continue
            if result is None:
                send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32602, "message": "Unknown tool: " + str(params.get("name"))}})
            else:
                send({"jsonrpc": "2.0", "id": mid, "result": result})
        else:
            send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "Method not found"}})


if __name__ == "__main__":
    main()

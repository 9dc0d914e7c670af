#!/usr/bin/env python3
"""Writes the corpus of ordinary transcripts that redaction rules are measured
against (cli/src/sync/testdata/redact-corpus.jsonl): real-shaped eVi, Claude
Code and Codex lines full of things that look random but are not secrets
(git hashes, SHA-256s, UUIDs, base64 images, minified JS, lockfile integrity
hashes, long hex, docker digests, URLs without passwords, placeholders).

Deterministic (fixed seed): run it again and the file is the same.
    python3 bench/redact_corpus.py > cli/src/sync/testdata/redact-corpus.jsonl
"""
import base64
import hashlib
import json
import random
import sys
import uuid

R = random.Random(20261202)


def hexs(n):
    return "".join(R.choice("0123456789abcdef") for _ in range(n))


def b64(n):
    return base64.b64encode(bytes(R.getrandbits(8) for _ in range(n))).decode()


def uid():
    return str(uuid.UUID(int=R.getrandbits(128), version=4))


def ts(i):
    return f"2026-06-{1 + i % 28:02d}T{i % 24:02d}:{i % 60:02d}:{(i * 7) % 60:02d}.{i % 1000:03d}Z"


WORDS = (
    "the function returns a value when the request succeeds and otherwise retries with backoff "
    "secret management keys tokens private public config environment variable deploy build test "
    "migrate schema index query cache session header cookie auth login password user account "
    "sk-learn task-runner disk-usage eyes they key eyebrow survey"
).split()


def prose(n):
    return " ".join(R.choice(WORDS) for _ in range(n)).capitalize() + "."


CODE = [
    "fn main() {\n    let args: Vec<String> = std::env::args().collect();\n    println!(\"{:?}\", args);\n}\n",
    "import os\nAWS_SECRET_ACCESS_KEY = os.environ['AWS_SECRET_ACCESS_KEY']\nsecret = os.getenv('APP_SECRET', '')\n",
    "const token = process.env.GITHUB_TOKEN;\nconst url = `https://api.github.com/repos/${owner}/${repo}`;\n",
    "DATABASE_URL=postgres://postgres@127.0.0.1:5432/test\nREDIS_URL=redis://localhost:6379/0\n",
    "export AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE\nexport AWS_SECRET_ACCESS_KEY=${AWS_SECRET}\n",
    "apiVersion: v1\nkind: Secret\nmetadata:\n  name: tls-cert\ntype: kubernetes.io/tls\n",
    "password = getpass.getpass('password: ')\nconn = connect(f'postgresql://{user}:{password}@{host}/db')\n",
    "git clone git@github.com:rust-lang/regex.git\ngit remote add origin ssh://git@gitlab.com/group/project.git\n",
    "curl -H \"Authorization: Bearer $TOKEN\" https://api.example.com/v1/items?page=2\n",
    "let re = Regex::new(r\"^[A-Za-z0-9+/]{40}$\").unwrap();\n",
    "-----BEGIN CERTIFICATE-----\n" + "\n".join(b64(48) for _ in range(6)) + "\n-----END CERTIFICATE-----\n",
    "-----BEGIN PUBLIC KEY-----\n" + "\n".join(b64(48) for _ in range(4)) + "\n-----END PUBLIC KEY-----\n",
    "ssh-ed25519 " + b64(51) + " user@laptop\n",
    "https://user@example.com/path and http://[::1]:8080/healthz and https://example.com:8443/a@b\n",
    "mongodb://${DB_USER}:${DB_PASS}@mongo:27017/app and amqp://guest:<password>@rabbit:5672/\n",
    "The docs example key is AKIAIOSFODNN7EXAMPLE; never paste a real one.\n",
    # Near misses that ordinary coding sessions hold: documentation examples,
    # PEM-parsing code, placeholders, dev defaults.
    "aws_access_key_id = AKIAIOSFODNN7EXAMPLE\naws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n",
    'const PEM_HEADER = "-----BEGIN PRIVATE KEY-----";\nconst PEM_FOOTER = "-----END PRIVATE KEY-----";\nif (!pem.startsWith(PEM_HEADER)) throw new Error("not a PKCS#8 key");\n',
    "if line.startswith('-----BEGIN RSA PRIVATE KEY-----'):\n    in_key = True  # the body follows, 64 columns of base64\nelif line.startswith('-----END RSA PRIVATE KEY-----'):\n    in_key = False\n",
    "-----BEGIN OPENSSH PRIVATE KEY-----\n...\n-----END OPENSSH PRIVATE KEY-----\n",
    "DATABASE_URL=postgres://user:password@localhost:5432/mydb\nAMQP_URL=amqp://guest:guest@localhost:5672//\nhttp://admin:admin@127.0.0.1:15672/\n",
    "GITHUB_TOKEN=ghp_XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX\nSLACK_BOT_TOKEN=xoxb-your-bot-token\nOPENAI_API_KEY=sk-...\n",
    # The example token of the JWT introduction every tutorial copies.
    'expect(decode("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c").sub).toBe("1234567890");\n',
]


def git_log():
    lines = []
    for _ in range(R.randint(3, 12)):
        lines.append(f"commit {hexs(40)}\nAuthor: Dev <dev@example.com>\nDate:   Tue Jun 9 10:00:00 2026 +0200\n\n    {prose(6)}\n")
    return "\n".join(lines)


def sha_sums():
    return "\n".join(f"{hexs(64)}  target/release/file-{i}.tar.gz" for i in range(R.randint(2, 8)))


def lockfile():
    out = []
    for i in range(R.randint(3, 10)):
        name = R.choice(["react", "lodash", "@babel/core", "typescript", "esbuild", "vite"])
        integ = "sha512-" + b64(64)
        out.append(
            f'"node_modules/{name}": {{"version": "1.{i}.0", "resolved": "https://registry.npmjs.org/{name}/-/{name.split("/")[-1]}-1.{i}.0.tgz", "integrity": "{integ}"}}'
        )
    out.append(f'checksum = "{hexs(64)}"')
    return ",\n".join(out)


def minified_js():
    parts = []
    for _ in range(R.randint(20, 60)):
        v = "".join(R.choice("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(R.randint(1, 3)))
        parts.append(
            R.choice(
                [
                    f"var {v}=function(e,t){{return e&&e.__esModule?e:{{default:e}}}};",
                    f'"object"==typeof exports&&"undefined"!=typeof module?module.exports={v}():"function"==typeof define&&define.amd?define([],{v}):this.{v}={v}();',
                    f"{v}.prototype.key=function(){{return this._k||(this._k=Symbol(\"{hexs(8)}\"))}};",
                    f'const {v}="{b64(R.randint(12, 40))}";',
                ]
            )
        )
    return "".join(parts)


def image():
    return "data:image/png;base64," + b64(R.randint(1500, 6000))


def docker():
    return "\n".join(
        f"{R.choice(['postgres', 'nginx', 'redis'])}@sha256:{hexs(64)}   {uid()}" for _ in range(R.randint(2, 5))
    )


def tool_output():
    kind = R.choice(["git", "sha", "lock", "js", "docker", "code", "hex", "uuid", "aws"])
    if kind == "git":
        return git_log()
    if kind == "sha":
        return sha_sums()
    if kind == "lock":
        return lockfile()
    if kind == "js":
        return minified_js()
    if kind == "docker":
        return docker()
    if kind == "hex":
        return hexs(R.choice([32, 64, 128, 256, 512]))
    if kind == "uuid":
        return "\n".join(uid() for _ in range(R.randint(3, 20)))
    if kind == "aws":
        return json.dumps(
            {
                "UserId": "AIDA" + "".join(R.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567") for _ in range(17)),
                "Account": str(R.randint(10**11, 10**12 - 1)),
                "Arn": "arn:aws:iam::123456789012:user/dev",
                "RequestId": uid(),
                "aws_access_key_id": "****************" + "".join(R.choice("ABCDEFGHIJKLMNOP") for _ in range(4)),
            },
            indent=2,
        )
    return R.choice(CODE)


def evi_line(i, parent):
    role = R.choice(["user", "assistant", "tool", "tool", "assistant"])
    line = {"role": role, "ts": ts(i)}
    if role == "user":
        line["content"] = prose(R.randint(5, 40)) + ("\n```\n" + R.choice(CODE) + "```" if R.random() < 0.4 else "")
    elif role == "assistant":
        if R.random() < 0.5:
            line["content"] = ""
            line["tool_calls"] = [
                {"id": "call_" + b64(18).replace("/", "_").replace("+", "-")[:24], "name": R.choice(["bash", "read_file", "write_file"]),
                 "arguments": json.dumps({"command": R.choice(["git log", "sha256sum target/*", "cat package-lock.json", "ls -la"])})}
            ]
        else:
            line["content"] = prose(R.randint(10, 80))
    else:
        line["tool_name"] = R.choice(["bash", "read_file", "web_fetch"])
        line["content"] = image() if R.random() < 0.05 else tool_output()
    if parent is not None and R.random() < 0.3:
        line = {"id": hexs(32), "parentId": parent, **line}
    return line


def claude_line(i, parent):
    u = uid()
    kind = R.choice(["user", "assistant"])
    content = (
        [{"type": "tool_result", "tool_use_id": "toolu_01" + b64(18)[:22], "content": tool_output()}]
        if kind == "user" and R.random() < 0.6
        else [{"type": "text", "text": prose(R.randint(5, 60))}]
    )
    if R.random() < 0.04:
        content = [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": image()[22:]}}]
    return {
        "parentUuid": parent,
        "isSidechain": False,
        "userType": "external",
        "cwd": "/home/dev/src/project",
        "sessionId": uid(),
        "version": "1.0.51",
        "gitBranch": "main",
        "type": kind,
        "message": {"role": kind, "id": "msg_01" + b64(18)[:22], "content": content},
        "requestId": "req_011C" + b64(18)[:20],
        "uuid": u,
        "timestamp": ts(i),
    }, u


def codex_line(i):
    t = R.choice(["response_item", "event_msg", "turn_context"])
    payload = {"type": "message", "role": R.choice(["user", "assistant"]), "content": [{"type": "output_text", "text": prose(R.randint(5, 50))}]}
    if t == "response_item" and R.random() < 0.3:
        payload = {"type": "reasoning", "summary": [], "encrypted_content": "gAAAAAB" + b64(R.randint(300, 1500))}
    if t == "event_msg":
        payload = {"type": "exec_command_end", "call_id": "call_" + b64(18)[:24], "stdout": tool_output(), "exit_code": 0}
    return {"timestamp": ts(i), "type": t, "payload": payload}


def main():
    out = sys.stdout
    parent = None
    for i in range(900):
        line = evi_line(i, parent)
        parent = line.get("id", hexs(32))
        out.write(json.dumps(line, separators=(",", ":"), ensure_ascii=False) + "\n")
    parent = None
    for i in range(500):
        line, parent = claude_line(i, parent)
        out.write(json.dumps(line, separators=(",", ":")) + "\n")
    for i in range(400):
        # Codex writes `\/` in some strings: both spellings are here.
        text = json.dumps(codex_line(i), separators=(",", ":"))
        if i % 3 == 0:
            text = text.replace("/", "\\/")
        out.write(text + "\n")
    # Lines that are not JSON at all (a crash dump pasted into a file).
    for _ in range(20):
        out.write(f"panic at {hexs(16)}: {prose(8)} {sha_sums()}".replace("\n", " ") + "\n")


if __name__ == "__main__":
    main()

import json, hmac, hashlib, struct
v = json.load(open('/work/main/cli/src/sync/testdata/vectors.json'))
CH = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"
s = v["identity"].lower(); data = s[s.rfind('1')+1:-6]
acc=bits=0; out=bytearray()
for c in data:
    acc=(acc<<5)|CH.index(c); bits+=5
    if bits>=8: bits-=8; out.append((acc>>bits)&0xff); acc&=(1<<bits)-1
secret=bytes(out); assert len(secret)==32
def hkdf(info):
    prk=hmac.new(b"evi-sync-v1", secret, hashlib.sha256).digest()
    return hmac.new(prk, info+b"\x01", hashlib.sha256).digest()
idk=hkdf(b"evi-sync-v1 keyed-id"); mk=hkdf(b"evi-sync-v1 segment-mac"); kcv=hkdf(b"evi-sync-v1 key-check")
assert idk.hex()==v["hkdf"]["keyed_id_key"]; assert mk.hex()==v["hkdf"]["segment_mac_key"]; assert kcv.hex()==v["hkdf"]["key_check_value"]
lp=lambda b: struct.pack(">I",len(b))+b
kid=lambda *f: hmac.new(idk, b"".join(lp(x) for x in f), hashlib.sha256).hexdigest()
k=v["keyed_ids"]
assert kid(b"session", b"0193a-sess_1.x")==k["session"]["key"]
for e in k["entries"]: assert kid(b"entry", e["session_id"].encode(), e["entry_id"].encode())==e["key"]
assert kid(b"blob", k["blob"]["sha256"].encode())==k["blob"]["key"]
assert kid(b"journal-stream", b"laptop")==k["journal_stream"]["key"]
for e in k["journal_entries"]: assert kid(b"journal-entry", b"laptop", struct.pack(">Q", e["seq"]))==e["key"]
# segment plaintext
seg=v["segments"]["entries"]
body=lp(seg["session_id"].encode())+struct.pack(">I",len(seg["entries"]))
for e in seg["entries"]:
    body+=lp(e["id"].encode())
    body+= b"\x00" if e["parent"] is None else b"\x01"+lp(e["parent"].encode())
    body+=e["day"].encode()+lp(bytes.fromhex(e["line_hex"]))
def mac(kind, body, stream, ids):
    m=lp(b"evi-segment-v1")+b"\x01"+lp(kind)+body+struct.pack(">Q",len(body))+lp(stream.encode())+struct.pack(">I",len(ids))+b"".join(lp(i.encode()) for i in ids)
    return hmac.new(mk, m, hashlib.sha256).digest()
s=seg["sealed"]; t=mac(b"entries", body, s["stream"], s["entry_ids"])
assert t.hex()==s["mac_hex"]; assert (b"EVISEG\x01\x01"+body+t).hex()==s["plaintext_hex"]
j=v["segments"]["journal"]
body=lp(j["device"].encode())+struct.pack(">I",len(j["lines"]))
for l in j["lines"]: body+=struct.pack(">Q",l["seq"])+lp(bytes.fromhex(l["line_hex"]))
s=j["sealed"]; t=mac(b"journal", body, s["stream"], s["entry_ids"])
assert (b"EVISEG\x01\x02"+body+t).hex()==s["plaintext_hex"]
# format 2: journal names, lines keyed by content, entry flags and line blobs
n=k["journal_name"]; alnum=[c.lower() for c in n["device_id"] if c.isascii() and c.isalnum()]
assert n["device"]+"-"+"".join(alnum[-8:])==n["name"]
name=n["name"].encode()
assert kid(b"journal-stream", name)==k["journal_stream_v2"]["key"]
for e in k["journal_lines"]: assert kid(b"journal-line", e["name"].encode(), bytes.fromhex(e["line_hex"]))==e["key"]
def mac2(kind, body, stream, ids):
    m=lp(b"evi-segment-v1")+b"\x02"+lp(kind)+body+struct.pack(">Q",len(body))+lp(stream.encode())+struct.pack(">I",len(ids))+b"".join(lp(i.encode()) for i in ids)
    return hmac.new(mk, m, hashlib.sha256).digest()
v2=v["segments_v2"]
for case in ("entries", "entries_line_blob"):
    seg=v2[case]
    body=lp(seg["session_id"].encode())+struct.pack(">I",len(seg["entries"]))
    ids=[]
    for e in seg["entries"]:
        blob=e.get("line_blob")
        flags=(0 if e["parent"] is None else 1)|(0 if blob is None else 2)
        body+=lp(e["id"].encode())+bytes([flags])
        if e["parent"] is not None: body+=lp(e["parent"].encode())
        body+=e["day"].encode()
        if blob is None: body+=lp(bytes.fromhex(e["line_hex"]))
        else:
            assert blob["len"]>0 and e["line_hex"]=="" and blob["sha256"]==blob["sha256"].lower()
            body+=struct.pack(">Q",blob["len"])+bytes.fromhex(blob["sha256"])
        ids.append(kid(b"entry", seg["session_id"].encode(), e["id"].encode()))
    s=seg["sealed"]; assert ids==s["entry_ids"]; assert kid(b"session", seg["session_id"].encode())==s["stream"]
    t=mac2(b"entries", body, s["stream"], s["entry_ids"])
    assert t.hex()==s["mac_hex"]; assert (b"EVISEG\x02\x01"+body+t).hex()==s["plaintext_hex"]
j=v2["journal"]; name=j["name"].encode()
body=lp(name)+struct.pack(">I",len(j["lines"]))
for l in j["lines"]: body+=struct.pack(">Q",l["seq"])+lp(bytes.fromhex(l["line_hex"]))
s=j["sealed"]; t=mac2(b"journal", body, s["stream"], s["entry_ids"])
assert s["stream"]==kid(b"journal-stream", name)
assert s["entry_ids"]==[kid(b"journal-line", name, bytes.fromhex(l["line_hex"])) for l in j["lines"]]
assert t.hex()==s["mac_hex"]; assert (b"EVISEG\x02\x02"+body+t).hex()==s["plaintext_hex"]
fp=hashlib.sha256(b"evi-fingerprint-v1\0"+v["recipient"].encode()).hexdigest()[:16]
assert "-".join(fp[i:i+4] for i in range(0,16,4))==v["fingerprint"]
print("independent check OK")

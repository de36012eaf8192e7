#!/usr/bin/env python3
"""A tiny authoritative DNS server on loopback for the /v1/verify benchmark (stdlib only, UDP).

Usage: dnsd.py PORT

Every name exists and has an MX record (10 mx.<name>) and an A record (192.0.2.1), except names
whose first label starts with "nx", which are NXDOMAIN. Other types get an empty NOERROR answer.
It answers only on 127.0.0.1, so the benchmark never sends DNS traffic off the machine.
"""
import socket
import struct
import sys

TTL = 300
MX, A = 15, 1


def encode_name(labels):
    return b"".join(bytes([len(l)]) + l for l in labels) + b"\x00"


def answer(query):
    if len(query) < 12:
        return None
    ident, flags, qdcount = struct.unpack(">HHH", query[:6])
    if qdcount != 1:
        return None
    labels, i = [], 12
    while i < len(query) and query[i] != 0:
        n = query[i]
        labels.append(query[i + 1 : i + 1 + n])
        i += 1 + n
    qtype, _qclass = struct.unpack(">HH", query[i + 1 : i + 5])
    question = query[12 : i + 5]
    nx = bool(labels) and labels[0].lower().startswith(b"nx")
    rd = flags & 0x0100
    records = []
    if not nx and qtype == MX:
        records.append((MX, struct.pack(">H", 10) + encode_name([b"mx"] + labels)))
    elif not nx and qtype == A:
        records.append((A, bytes([192, 0, 2, 1])))
    header = struct.pack(
        ">HHHHHH", ident, 0x8400 | rd | (3 if nx else 0), 1, len(records), 0, 0
    )
    body = b"".join(
        struct.pack(">HHHIH", 0xC00C, rtype, 1, TTL, len(rdata)) + rdata
        for rtype, rdata in records
    )
    return header + question + body


def main():
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", int(sys.argv[1])))
    while True:
        data, peer = sock.recvfrom(4096)
        try:
            reply = answer(data)
        except (IndexError, struct.error):
            reply = None
        if reply:
            sock.sendto(reply, peer)


if __name__ == "__main__":
    main()

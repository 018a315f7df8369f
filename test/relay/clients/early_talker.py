"""An early talker: connects, sends its first command at once without waiting
for the greeting, then says it has (by creating the file named by argv[3]) and
prints every byte the server sends until it closes the connection (or until
10 s of silence, printed as "(no more)": the server kept it open)."""
import socket
import sys

port, line, marker = int(sys.argv[1]), sys.argv[2], sys.argv[3]
conn = socket.create_connection(("127.0.0.1", port))
conn.sendall(line.encode("ascii") + b"\r\n")
open(marker, "w").close()
conn.settimeout(10)
received = b""
try:
    while True:
        chunk = conn.recv(4096)
        if not chunk:
            break
        received += chunk
except socket.timeout:
    received += b"(no more)"
sys.stdout.write(received.decode("latin1"))

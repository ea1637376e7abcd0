#!/usr/bin/python3
"""l0-http.py DIR: the L0 end of the network e2e test. Serves DIR/blob on GET /blob and stores the body of
POST /upload/NAME in DIR/upload-NAME (NAME: letters and digits), on 127.0.0.1 at a port the kernel picks
(several rigs run at once), written to DIR/port once it listens. A guest behind QEMU's user-mode network
reaches it as 10.0.2.2:PORT. Logs each request to stderr; runs until killed."""
import http.server
import os
import re
import sys

DIR = sys.argv[1]


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path != "/blob":
            self.send_error(404)
            return
        with open(os.path.join(DIR, "blob"), "rb") as f:
            data = f.read()
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        m = re.fullmatch(r"/upload/([A-Za-z0-9]+)", self.path)
        if not m:
            self.send_error(404)
            return
        length = self.headers.get("Content-Length", "")
        if not length.isdigit():
            self.send_error(400, "Content-Length missing or not a number")
            return
        data = self.rfile.read(int(length))
        tmp = os.path.join(DIR, ".upload.tmp")
        with open(tmp, "wb") as f:
            f.write(data)
        os.rename(tmp, os.path.join(DIR, "upload-" + m.group(1)))
        self.send_response(200)
        self.send_header("Content-Length", "3")
        self.end_headers()
        self.wfile.write(b"ok\n")


def main():
    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    with open(os.path.join(DIR, "port.tmp"), "w") as f:
        f.write("%d\n" % server.server_address[1])
    os.rename(os.path.join(DIR, "port.tmp"), os.path.join(DIR, "port"))
    server.serve_forever()


if __name__ == "__main__":
    main()

"""tlsfront.py UPSTREAM_PORT CERT KEY — a TLS front for kubesim (which serves plain HTTP): accepts TLS on
127.0.0.1 (port printed on stdout) and relays each connection's bytes to 127.0.0.1:UPSTREAM_PORT,
both ways, watches included. The operator's in-cluster client speaks only HTTPS and verifies the
service account's ca.crt; tests/kubesim/testlib.sh's ks_start_podman_tls uses this."""
import asyncio, ssl, sys
up = int(sys.argv[1])
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[2], sys.argv[3])
async def pump(r, w):
    try:
        while True:
            d = await r.read(65536)
            if not d:
                break
            w.write(d)
            await w.drain()
    except Exception:
        pass
    finally:
        try:
            w.close()
        except Exception:
            pass
async def handle(cr, cw):
    try:
        ur, uw = await asyncio.open_connection("127.0.0.1", up)
    except OSError:
        cw.close()
        return
    await asyncio.gather(pump(cr, uw), pump(ur, cw))
async def main():
    srv = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=ctx)
    print(srv.sockets[0].getsockname()[1], flush=True)
    await srv.serve_forever()
asyncio.run(main())

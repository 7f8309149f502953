"""The rendezvous of an elastic dlrun-launch job (`--nnodes MIN:MAX`): which launchers run the next
round of workers, in which order, and when a running round should stop to let a waiting one in.

Standard library only. One launcher hosts it (the one whose host owns --master-addr: it can bind
--master-addr:--master-port); every launcher, that one included, talks to it over TCP with one
JSON object a line, each request answered by one line. Requests are short and polled (no call
blocks on the server), so a launcher that stops asking is simply a launcher not heard from:

  hello {run_id, node, host, nproc, hosting}  -> {ok} | {error}
  join  {node, after}    after = the round this launcher last ran (-1: none). Its group has ended
                         (or it is new): it waits for the next round. Answer: {round, node_rank,
                         nnodes, world_size, rank_offset} once it is in a round, else {wait,
                         why}, or {finished} when the job has completed.
  beat  {node}           while its group runs, every BEAT_S. Answer {regroup: true} when a
                         launcher waits to join and the round has room for it: save and restart.
  done  {node, code}     its group ended for good with `code` (0: the job completed), or the
                         launcher was asked to stop: it takes part in no further round.

A round forms when every launcher of the previous round that is still heard from has asked to
join again (the others are dropped NODE_LOST_S after their last word), at least MIN are waiting,
and the hosting launcher is among them (it is node 0: its first worker is rank 0 and hosts the
workers' store). Up to MAX take part, the hosting launcher first, then in the order they first
arrived; the job's first round also waits up to --rdzv-last-call seconds for launchers beyond
MIN. docs/distributed.md ("The elastic launcher") is the contract."""
import json
import socket
import threading
import time

BEAT_S = 1.0          # a launcher's beat while its group runs (and its join polls, faster)
NODE_LOST_S = 10.0    # a launcher not heard from for this long is out of the job
IO_TIMEOUT_S = 5.0    # one request and its answer
MAX_LINE = 65536


class RendezvousError(Exception):
    """The rendezvous refused this launcher (another job's, a malformed answer): exit 2."""


class Unreachable(Exception):
    """The rendezvous did not answer (refused, reset, timed out)."""


# ---------------------------------------------------------------------------------------------
# The server, inside the hosting launcher.

class Server:
    def __init__(self, listener, run_id, min_nodes, max_nodes, last_call_s, log):
        self.listener = listener
        self.run_id = run_id
        self.min, self.max = min_nodes, max_nodes
        self.last_call_s = last_call_s
        self.print = log
        self.said = []            # messages decided under the lock, printed after it (an output
                                  # that blocks must not stall the rendezvous)
        self.lock = threading.Lock()
        self.nodes = {}           # id -> {host, nproc, hosting, seen, state, order, assigned}
        self.order = 0            # arrival counter (the order of node ranks after the host)
        self.round = -1           # the last round formed
        self.members = []         # its launchers, node rank order
        self.running = False      # its groups have not all ended
        self.finished = None      # the exit code of a completed job
        self.first_waiting = None  # when the first round's waiting list last changed

    def start(self):
        threading.Thread(target=self.accept_loop, daemon=True).start()

    def accept_loop(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return  # the listener was closed: the launcher is exiting
            threading.Thread(target=self.serve, args=(conn,), daemon=True).start()

    def serve(self, conn):
        conn.settimeout(NODE_LOST_S + IO_TIMEOUT_S)
        with conn, conn.makefile("rwb") as f:
            while True:
                try:
                    line = f.readline(MAX_LINE)
                except OSError:
                    return
                if not line:
                    return
                try:
                    req = json.loads(line)
                    if not isinstance(req, dict):
                        raise ValueError("not an object")
                    with self.lock:
                        answer = self.handle(req, time.monotonic())
                        said, self.said = self.said, []
                    for message in said:
                        self.print(message)
                except (ValueError, KeyError, TypeError) as e:
                    answer = {"error": f"malformed request: {e}"}
                try:
                    f.write((json.dumps(answer) + "\n").encode())
                    f.flush()
                except OSError:
                    return

    def log(self, message):
        self.said.append(message)

    def name(self, node):
        n = self.nodes[node]
        return f"{n['host']} ({n['nproc']} worker{'s' if n['nproc'] != 1 else ''})"

    def handle(self, req, now):
        op, node = req["op"], str(req["node"])
        if op == "hello":
            if req["run_id"] != self.run_id:
                return {"error": f"this rendezvous is job {self.run_id!r}'s; the launcher is job {req['run_id']!r}'s "
                                 f"(give every node the same --rdzv-id)"}
            nproc = int(req["nproc"])
            if nproc < 1:
                return {"error": f"nproc {nproc}: must be at least 1"}
            if node in self.nodes:  # a reconnection: the same launcher, its place kept
                self.nodes[node]["seen"] = now
                return {"ok": True}
            self.order += 1
            self.nodes[node] = {"host": str(req["host"]), "nproc": nproc, "hosting": bool(req["hosting"]),
                                "seen": now, "state": "new", "order": self.order, "assigned": None}
            return {"ok": True}
        n = self.nodes.get(node)
        if n is None:
            return {"error": "unknown launcher: say hello first"}
        if n["state"] == "lost":
            self.log(f"{self.name(node)} is heard from again after it was dropped: it joins as a new node")
            n["state"] = "new"
        n["seen"] = now
        if op == "beat":
            self.drop_silent(now)
            room = self.running and len(self.members) < self.max
            return {"regroup": room and node in self.members and any(
                m["state"] == "waiting" and k not in self.members for k, m in self.nodes.items())}
        if op == "done":
            code = int(req["code"])
            n["state"] = "done"
            if code == 0 and self.finished is None:
                self.finished = 0
                self.log(f"{self.name(node)}: the job completed")
            if node in self.members:
                self.running = False
            return {"ok": True}
        if op != "join":
            return {"error": f"unknown request {op!r}"}
        after = int(req["after"])
        if node in self.members and n["assigned"] is not None and n["assigned"]["round"] > after:
            return n["assigned"]  # formed while it polled: its place in the round
        if self.finished is not None:
            return {"finished": self.finished}
        if n["state"] != "waiting":
            n["state"] = "waiting"
            if node in self.members and self.running:
                self.running = False  # one group ended: the others end too (a lost peer)
            if self.round < 0:
                self.first_waiting = now
        self.drop_silent(now)
        why = self.try_form(now)
        if n["assigned"] is not None and n["assigned"]["round"] > after and node in self.members:
            return n["assigned"]
        return {"wait": True, "why": why or "a round is running and has no room"}

    def drop_silent(self, now):
        for k, m in self.nodes.items():
            if m["state"] in ("new", "waiting", "running") and now - m["seen"] > NODE_LOST_S:
                m["state"] = "lost"
                self.log(f"{self.name(k)} not heard from for {NODE_LOST_S:g} s: it is out of the job")
                if self.round < 0:
                    self.first_waiting = now

    def try_form(self, now):
        """Form the next round if it may be formed now; else why not (for the waiting launchers)."""
        if self.running:
            return "a round is running"
        behind = [k for k in self.members if self.nodes[k]["state"] == "running"]
        if behind:
            return f"waiting for {', '.join(self.name(k) for k in behind)} to end its workers"
        waiting = sorted((k for k, m in self.nodes.items() if m["state"] == "waiting"),
                         key=lambda k: (not self.nodes[k]["hosting"], self.nodes[k]["order"]))
        if not any(self.nodes[k]["hosting"] for k in waiting):
            return "waiting for the launcher that hosts the rendezvous"
        if len(waiting) < self.min:
            return f"{len(waiting)} of at least {self.min} nodes here"
        if self.round < 0 and len(waiting) < self.max and now - self.first_waiting < self.last_call_s:
            return f"{len(waiting)} of up to {self.max} nodes here: the first round waits {self.last_call_s:g} s for more"
        self.round += 1
        self.members = waiting[:self.max]
        self.running = True
        world = sum(self.nodes[k]["nproc"] for k in self.members)
        offset = 0
        for rank, k in enumerate(self.members):
            m = self.nodes[k]
            m["state"] = "running"
            m["assigned"] = {"round": self.round, "node_rank": rank, "nnodes": len(self.members),
                             "world_size": world, "rank_offset": offset}
            offset += m["nproc"]
        self.log(f"round {self.round}: {len(self.members)} node(s), world size {world}: "
                 f"{', '.join(self.name(k) for k in self.members)}")
        return None


# ---------------------------------------------------------------------------------------------
# A launcher's side.

class Client:
    def __init__(self, addr, port, node, host, nproc, run_id, hosting):
        self.addr, self.port = addr, port
        self.hello_req = {"op": "hello", "run_id": run_id, "node": node, "host": host, "nproc": nproc,
                          "hosting": hosting}
        self.node = node
        self.lock = threading.Lock()
        self.conn = None
        self.reader = None

    def close(self):
        if self.conn is not None:
            try:
                self.conn.close()
            except OSError:
                pass
        self.conn = self.reader = None

    def exchange(self, req):
        self.conn.sendall((json.dumps(req) + "\n").encode())
        line = self.reader.readline(MAX_LINE)
        if not line:
            raise OSError("the rendezvous closed the connection")
        try:
            answer = json.loads(line)
        except ValueError:
            raise RendezvousError(f"{self.addr}:{self.port} answered {line[:80]!r}, not a dlrun-launch rendezvous "
                                  f"(another program on that port?)") from None
        if not isinstance(answer, dict):
            raise RendezvousError(f"{self.addr}:{self.port}: malformed answer {line[:80]!r}")
        if "error" in answer:
            raise RendezvousError(f"the rendezvous at {self.addr}:{self.port}: {answer['error']}")
        return answer

    def call(self, op, **fields):
        """One request; Unreachable when the rendezvous cannot be reached or does not answer."""
        with self.lock:
            try:
                if self.conn is None:
                    self.conn = socket.create_connection((self.addr, self.port), timeout=IO_TIMEOUT_S)
                    self.conn.settimeout(IO_TIMEOUT_S)
                    self.reader = self.conn.makefile("rb")
                    # A new connection (the first, or after a broken one): say who this is again.
                    self.exchange(self.hello_req)
                return self.exchange({"op": op, "node": self.node, **fields})
            except (OSError, socket.timeout) as e:
                self.close()
                raise Unreachable(str(e) or type(e).__name__) from None
            except RendezvousError:
                self.close()
                raise


def bind_listener(addr, port):
    """A listening socket on addr:port when addr is this host's and the port is free; None when
    another host (or another launcher here) holds the rendezvous."""
    try:
        infos = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return None
    for family, _, _, _, sockaddr in infos:
        s = socket.socket(family, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(sockaddr)
            s.listen(64)
            return s
        except OSError:
            s.close()
    return None

import { readdirSync, readFileSync, readlinkSync } from 'node:fs';

/**
 * What the kernel says of a process group's processes, read from /proc (Linux): which processes a
 * parent runs, and which of them holds a TCP connection. No `ps` or `ss` needed.
 */

/** The pids of `parent`'s children whose command line contains `command`. */
export function childPids(parent: number, command: string): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      // The command name may hold spaces and parentheses: the fields after its closing one are plain.
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid !== parent) continue;
      if (readFileSync(`/proc/${entry}/cmdline`, 'utf8').includes(command)) pids.push(Number(entry));
    } catch {
      // The process ended while it was read.
    }
  }
  return pids;
}

/**
 * The pid, among `pids`, holding the server side of the IPv4 TCP connection between `serverPort`
 * and a client's `clientPort`, or 0.
 */
export function holderOf(pids: number[], serverPort: number, clientPort: number): number {
  const port = (address: string | undefined) => parseInt(address?.split(':')[1] ?? '', 16);
  const inode = readFileSync('/proc/net/tcp', 'utf8')
    .split('\n')
    .slice(1)
    .map((line) => line.trim().split(/\s+/))
    .find((fields) => port(fields[1]) === serverPort && port(fields[2]) === clientPort)?.[9];
  if (inode === undefined) return 0;
  for (const pid of pids) {
    try {
      for (const fd of readdirSync(`/proc/${pid}/fd`)) {
        if (readlinkSync(`/proc/${pid}/fd/${fd}`) === `socket:[${inode}]`) return pid;
      }
    } catch {
      // The process ended, or closed the descriptor, while it was read.
    }
  }
  return 0;
}

// Preloaded with `--import`: this process's clock runs CLOCK_SKEW_MS off (positive: ahead), as on a
// machine whose NTP is broken. Date.now() and new Date() are skewed; performance.now() (monotonic) is not.
// Messages from the parent: `{ clockSkewMs }` changes the skew from then on (a clock stepped while running);
// `{ suspendMs }` plays a suspend of the machine that long (a VM paused, a laptop asleep): the monotonic
// clock does not count it, the wall clock (and Redis's) does.
let skew = Number(process.env.CLOCK_SKEW_MS ?? 0);
let asleep = 0;
process.on('message', (message) => {
  if (typeof message?.clockSkewMs === 'number') skew = message.clockSkewMs;
  if (typeof message?.suspendMs === 'number') asleep += message.suspendMs;
});
const RealDate = Date;
const realNow = RealDate.now.bind(RealDate);
class SkewedDate extends RealDate {
  constructor(...args) {
    if (args.length === 0) super(realNow() + skew);
    else super(...args);
  }
  static now() {
    return realNow() + skew;
  }
}
globalThis.Date = SkewedDate;
const realPerformanceNow = globalThis.performance.now.bind(globalThis.performance);
globalThis.performance.now = () => realPerformanceNow() - asleep;

// Preloaded with `--import`: this process's clock runs CLOCK_SKEW_MS off (positive: ahead), as on a
// machine whose NTP is broken. Date.now() and new Date() are skewed; performance.now() (monotonic) is not.
// A `{ clockSkewMs }` message from the parent changes the skew from then on (a clock stepped while running).
let skew = Number(process.env.CLOCK_SKEW_MS ?? 0);
process.on('message', (message) => {
  if (typeof message?.clockSkewMs === 'number') skew = message.clockSkewMs;
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

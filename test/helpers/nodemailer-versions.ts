import nodemailer10 from 'nodemailer';
// @ts-expect-error nodemailer 6 is installed under an alias and has no types of its own
import nodemailer6 from 'nodemailer6';

/** The Nodemailer majors the suite runs against: the newest 10.x and 6.9. */
export const NODEMAILERS: { label: string; nodemailer: typeof nodemailer10 }[] = [
  { label: 'nodemailer 10', nodemailer: nodemailer10 },
  { label: 'nodemailer 6.9', nodemailer: nodemailer6 as typeof nodemailer10 },
];

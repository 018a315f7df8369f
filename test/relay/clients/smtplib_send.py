"""Sends one message with Python's smtplib (send_message), as a Django or cron
script would, and prints JSON: the bytes smtplib sent (flattened exactly as
send_message does, Bcc removed), the envelope recipients, and the error if any.

Usage: python3 smtplib_send.py '<json spec>'
spec: host, port, from, to[], cc[], bcc[], subject, body, message_id, date,
      user/password (optional), starttls (optional: CA file), implicit_tls (optional: CA file)
"""
import base64
import copy
import email.generator
import email.policy
import io
import json
import smtplib
import ssl
import sys
from email.message import EmailMessage

spec = json.loads(sys.argv[1])
msg = EmailMessage()
msg["From"] = spec["from"]
if spec.get("to"):
    msg["To"] = ", ".join(spec["to"])
if spec.get("cc"):
    msg["Cc"] = ", ".join(spec["cc"])
if spec.get("bcc"):
    msg["Bcc"] = ", ".join(spec["bcc"])
msg["Subject"] = spec["subject"]
msg["Message-ID"] = spec["message_id"]
msg["Date"] = spec["date"]
msg.set_content(spec["body"])

# What send_message puts on the wire (smtplib.SMTP.send_message, Python 3.11).
international = any(not a.isascii() for a in spec.get("to", []) + spec.get("cc", []) + spec.get("bcc", []) + [spec["from"]])
policy = msg.policy.clone(utf8=True) if international else msg.policy
msg_copy = copy.copy(msg)
del msg_copy["Bcc"]
del msg_copy["Resent-Bcc"]
with io.BytesIO() as out:
    email.generator.BytesGenerator(out, policy=policy).flatten(msg_copy, linesep="\r\n")
    flat = out.getvalue()

result = {"sent": base64.b64encode(flat).decode(), "rcpts": spec.get("to", []) + spec.get("cc", []) + spec.get("bcc", [])}


def context(cafile):
    ctx = ssl.create_default_context(cafile=cafile)
    ctx.check_hostname = False  # the test certificate names localhost; the netns test connects by address
    return ctx


try:
    if spec.get("implicit_tls"):
        smtp = smtplib.SMTP_SSL(spec["host"], spec["port"], timeout=20, context=context(spec["implicit_tls"]))
    else:
        smtp = smtplib.SMTP(spec["host"], spec["port"], timeout=20)
    with smtp:
        smtp.ehlo()
        result["features"] = sorted(smtp.esmtp_features.keys())
        if spec.get("starttls"):
            smtp.starttls(context=context(spec["starttls"]))
            smtp.ehlo()
            result["features_tls"] = sorted(smtp.esmtp_features.keys())
        if spec.get("password") is not None:
            smtp.login(spec.get("user", "relay"), spec["password"])
        refused = smtp.send_message(msg)
        result["refused"] = {k: [v[0], v[1].decode()] for k, v in refused.items()}
except smtplib.SMTPResponseException as err:
    result["error"] = {"type": type(err).__name__, "code": err.smtp_code, "message": err.smtp_error.decode(errors="replace")}
except smtplib.SMTPRecipientsRefused as err:
    result["error"] = {"type": type(err).__name__, "recipients": {k: [v[0], v[1].decode()] for k, v in err.recipients.items()}}
except smtplib.SMTPException as err:
    result["error"] = {"type": type(err).__name__, "message": str(err)}
print(json.dumps(result))

"""Uploading model weights or compiled artifacts under an S3 prefix, resumably.

The rules, in the order they apply:

* The directory is read completely before anything else happens: an entry that cannot be read
  (a directory without permission, a dangling link, a FIFO or device), a symbolic link that
  leads out of the directory or back into one of its own parents, or a name that cannot be an
  S3 key (not UTF-8; a control character, ``?``, ``#`` or ``\\``) stops the run with nothing
  sent, deleted or written. Links that stay inside the directory are followed, for files and
  directories alike: S3 has no links, so the target's content is uploaded under the link's
  name, and each such link is reported.
* Every file's SHA-256 and CRC-32 are computed locally (streaming). The SHA-256 is stored as
  object metadata, so a later run can tell an identical object from a different one of the
  same size; the CRC-32 is sent as the object's full-object checksum, so S3 refuses an object
  whose bytes differ from the ones hashed (a file that changed while it was uploaded), and the
  object's stored checksum is compared again after the transfer.
* A file whose object already exists with the same size and SHA-256 is skipped, so re-running
  after an interruption sends only what is missing.
* An object that differs, or an object under the prefix with no local file, is never replaced
  or deleted without ``overwrite`` / ``delete``; without them nothing is uploaded at all.
* One run at a time per prefix: each run holds the prefix's lease
  (:mod:`eks_inference.ops.upload.lease`) from before it looks at the prefix until it ends, and
  a second run is refused, naming the holder and when its lease expires; so is a run on a
  prefix around or inside one being uploaded, whose objects are partly the same.
* Every file is opened without following links and must be the very file the scan saw (same
  device, inode, size and mtime, still a regular file): a link, FIFO or other file swapped in
  later is refused before a byte of it is read. The bytes are hashed again as they are sent;
  a file that ends early or moves fails the read at once, and an object whose bytes sent
  differ from the bytes hashed is deleted before the manifest.
* Only a completed object counts: S3 does not list a multipart upload until it completes. The
  transfer manager aborts the multipart uploads of a failed or cancelled transfer (Ctrl-C, and
  SIGTERM, which stops an upload the same way); the ones a killed process or a lost
  connection left open under the prefix before this run's lease are aborted by the next run
  before it sends anything (and by the model bucket's lifecycle rule after a few days).
* The manifest (``_manifest.json``) is written last, after every file is verified in the
  bucket and every extra object is deleted; for compiled artifacts the completion marker
  follows it. Both are deleted before anything under the prefix changes, so a prefix with a
  manifest is always complete; if S3 refuses the first deletion of a run that only deletes,
  nothing changed and they are put back. A failed deletion names every key deleted before it.
* Every request, and the run's AWS work as a whole, has a total deadline
  (:mod:`eks_inference.ops.aws.deadlines`), so an endpoint that drips its answer cannot hold
  the command.

The modules, in the order a run uses them: :mod:`~eks_inference.ops.upload.scan` reads the
directory into :mod:`~eks_inference.ops.upload.files` records,
:mod:`~eks_inference.ops.upload.hashing` digests them, :mod:`~eks_inference.ops.upload.run`
takes the :mod:`~eks_inference.ops.upload.lease` and compares the prefix
(:mod:`~eks_inference.ops.upload.remote`), :mod:`~eks_inference.ops.upload.transfer` sends the
files, :mod:`~eks_inference.ops.upload.verify` checks them in the bucket,
:mod:`~eks_inference.ops.upload.delete` removes what must go, and
:mod:`~eks_inference.ops.upload.manifest` is written last;
:mod:`~eks_inference.ops.upload.settings` holds the run's options.
"""

# Lines of a refusal listing shown before "(+N more)".
MAX_LISTED = 20

#!/usr/bin/python
"""Several directories and small text files in one module call (the awide role).

ansible-core starts a Python and unpacks the module's payload for every task on every host:
0.3-0.4 s of CPU each. A role that writes a dozen small files per host with ``copy`` and
``template`` pays that a dozen times; this module writes them all in one call, each only when
it differs (content, owner, group or mode), so a second run changes nothing. The content is
rendered on the controller (``lookup('ansible.builtin.template', ...)``,
``lookup('ansible.builtin.file', ...)``). Honours check mode and, for files not marked
``secret``, diff mode. Secrets (``secret: true``) are never shown: no diff, and the task that
writes them sets ``no_log``.
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
import tempfile

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: awide_files
short_description: Directories and text files in one call, each changed only when it differs
description:
  - Creates the directories, writes the files, makes the links and removes the paths given,
    in that order.
  - A file is replaced (atomically, in its directory) when its content differs, and only
    written when missing if C(force) is false. Owner, group and mode are set when they differ.
options:
  directories:
    description: Directories to create, each a dict of path, mode, owner and group.
    type: list
    elements: dict
    default: []
  files:
    description: >-
      Files to write, each a dict of path, content, mode, owner, group, force (default true:
      replace a differing file; false: write only a missing one, leave an existing one as it
      is) and secret (no diff).
    type: list
    elements: dict
    default: []
  links:
    description: Symbolic links to make, each a dict of path and src (what it points at).
    type: list
    elements: dict
    default: []
  absent:
    description: Paths of files to remove.
    type: list
    elements: path
    default: []
"""

RETURN = r"""
changed_paths:
  description: The directories, files, links and removed paths that changed, in order.
  type: list
  returned: always
"""


def _ids(module: AnsibleModule, owner: str | None, group: str | None) -> tuple[int, int]:
    try:
        uid = -1 if owner is None else pwd.getpwnam(owner).pw_uid
        gid = -1 if group is None else grp.getgrnam(group).gr_gid
    except KeyError as e:
        module.fail_json(msg=f"no such user or group: {e}")
    return uid, gid


def _mode(spec: object) -> int | None:
    """A mode given as octal digits ("0644"), or as a number (YAML's 0644 unquoted)."""
    if spec is None or isinstance(spec, int):
        return spec
    return int(str(spec), 8)


def _fix_meta(path: str, uid: int, gid: int, mode: int | None, apply: bool) -> bool:
    """Set owner, group and mode where they differ; whether anything differed."""
    st = os.lstat(path)
    changed = False
    if (uid != -1 and st.st_uid != uid) or (gid != -1 and st.st_gid != gid):
        changed = True
        if apply:
            os.chown(path, uid, gid)
    if mode is not None and stat.S_IMODE(st.st_mode) != mode:
        changed = True
        if apply:
            os.chmod(path, mode)
    return changed


def _write(path: str, data: bytes, uid: int, gid: int, mode: int | None) -> None:
    """Replace path with data atomically, the new file given its owner and mode first."""
    fd, tmp = tempfile.mkstemp(prefix=".awide-", dir=os.path.dirname(path) or ".")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chown(tmp, uid, gid)
        os.chmod(tmp, 0o644 if mode is None else mode)
        os.rename(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "directories": {"type": "list", "elements": "dict", "default": []},
            "files": {"type": "list", "elements": "dict", "default": []},
            "links": {"type": "list", "elements": "dict", "default": []},
            "absent": {"type": "list", "elements": "path", "default": []},
        },
        supports_check_mode=True,
    )
    apply = not module.check_mode
    changed: list[str] = []
    diffs: list[dict[str, str]] = []
    for d in module.params["directories"]:
        path = d["path"]
        uid, gid = _ids(module, d.get("owner"), d.get("group"))
        mode = _mode(d.get("mode"))
        if not os.path.isdir(path):
            changed.append(path)
            if apply:
                os.makedirs(path, exist_ok=True)
                _fix_meta(path, uid, gid, mode, True)
        elif _fix_meta(path, uid, gid, mode, apply):
            changed.append(path)
    for f in module.params["files"]:
        path, data = f["path"], str(f.get("content", "")).encode()
        uid, gid = _ids(module, f.get("owner"), f.get("group"))
        mode = _mode(f.get("mode"))
        try:
            with open(path, "rb") as fh:
                old: bytes | None = fh.read()
        except FileNotFoundError:
            old = None
        if old is not None and not f.get("force", True):
            continue                           # written once: never replaced nor touched
        if old is None or old != data:
            changed.append(path)
            if not f.get("secret", False):
                diffs.append({"before_header": path, "after_header": path,
                              "before": (old or b"").decode(errors="replace"),
                              "after": data.decode(errors="replace")})
            if apply:
                _write(path, data, uid, gid, mode)
        elif _fix_meta(path, uid, gid, mode, apply):
            changed.append(path)
    for link in module.params["links"]:
        path, src = link["path"], link["src"]
        if not (os.path.islink(path) and os.readlink(path) == src):
            changed.append(path)
            if apply:
                if os.path.lexists(path):
                    os.unlink(path)
                os.symlink(src, path)
    for path in module.params["absent"]:
        if os.path.lexists(path):
            changed.append(path)
            if apply:
                os.unlink(path)
    result: dict[str, object] = {"changed": bool(changed), "changed_paths": changed}
    if module._diff and diffs:
        result["diff"] = diffs
    module.exit_json(**result)


if __name__ == "__main__":
    main()

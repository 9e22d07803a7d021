"""What an input path is, checked before it is opened: a FIFO blocks open() until a writer comes,
and a device such as /dev/zero never ends. Both ports and the tools refuse such paths in one line."""
import os
import stat

KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
         (stat.S_ISSOCK, "a socket"))


def special_file(path):
    """'a FIFO', 'a character device', ... when path (symlinks followed) is one of those, else None.
    A regular file, a folder, a missing or unreadable path is None: open() says what is wrong."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    return next((kind for test, kind in KINDS if test(mode)), None)

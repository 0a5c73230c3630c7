"""The operations core: every filesystem operation of a mount, independent of any FUSE binding."""

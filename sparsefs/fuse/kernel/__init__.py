"""The kernel-protocol backend: /dev/fuse spoken directly, plain files by kernel passthrough."""

//! evi-server: stores opaque, end-to-end encrypted records and blobs per user.
//! (Skeleton: the server issue fills it in.)

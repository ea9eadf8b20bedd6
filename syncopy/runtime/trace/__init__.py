"""What a launch did, as one rank saw it (records), every rank's launches as a Chrome / Perfetto trace
(chrome_trace), and as a picture (timeline)."""

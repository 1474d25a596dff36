"""I/O: event stores, the RunPod client, the Flash wire format, Hugging Face readers."""

"""The proxy's remoting door for 4.x clients."""

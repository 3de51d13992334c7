"""The console's writes, one module per entity (HackSoft's services; reads are in console/selectors/).

Each is named `<entity>_<action>`, keyword-only, one transaction each, and each appends to the audit
chain inside that transaction, so an action whose audit write fails does not happen. Import the
function from its module: this package re-exports nothing."""

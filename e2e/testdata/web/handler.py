# An HTTP function for the endpoint and trigger tests: an endpoint's event
# (Lambda's function URL payload 2.0) gets a response; any other event is
# answered as it came. ?fail=1, or {"fail": true}, raises.
def handle(event):
    if not isinstance(event, dict):
        return event
    if "requestContext" not in event:
        if event.get("fail"):
            raise RuntimeError("asked to fail")
        return event
    query = event.get("queryStringParameters") or {}
    if query.get("fail"):
        raise RuntimeError("asked to fail: " + event.get("rawPath", ""))
    return {
        "statusCode": 200,
        "headers": {"content-type": "text/plain", "x-path": event.get("rawPath", "")},
        "body": "hi " + query.get("name", "there") + " (" + event["requestContext"]["http"]["method"] + " " + str(len(event.get("body", ""))) + ")",
    }
